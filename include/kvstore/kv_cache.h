// KVCache and ConcatenateKVCache: the plain growing attention caches.
#ifndef KVSTORE_KV_CACHE_H_
#define KVSTORE_KV_CACHE_H_

#include <memory>

#include "kvstore/cache.h"
#include "kvstore/quantize.h"

namespace kvstore {

class QuantizedKVCache;

// mlx-lm's KVCache: keys/values in buffers grown in steps of 256 positions
// along axis 2, so appending S tokens costs O(S) except at growth points.
// state = [keys[..., :offset, :], values[..., :offset, :]] (the buffers
// themselves when offset == capacity); meta_state = "".
class KVCache : public Cache {
 public:
  static constexpr int64_t kStep = 256;

  KVCache();
  std::string_view class_name() const override { return "KVCache"; }
  std::unique_ptr<Cache> Copy() const override;

  Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values) override;
  Result<CacheState> State() const override;          // error when empty
  Status SetState(const CacheState& state) override;  // [keys, values]; offset = keys.dim(2)
  // [keys, values, offset]: the whole buffers; None, None when empty.
  Result<CacheState> FullState() const override;
  Status SetFullState(const CacheState& state) override;

  std::optional<int64_t> offset() const override { return offset_; }
  int64_t Size() const override { return offset_; }
  bool Empty() const override;
  Result<int64_t> Nbytes() const override;
  bool IsTrimmable() const override { return true; }
  Result<int64_t> Trim(int64_t n) override;
  // create_attention_mask(N, offset, return_array, window_size) (cache.py flavour).
  Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const override;
  std::optional<TokenRows> RowsByPosition() const override;
  Status RestoreRows(const CacheSpec& spec, std::span<const Array> rows) override;

  // A QuantizedKVCache holding mx.quantize of the whole buffer (spare
  // capacity included), same offset. InvalidArgument when a head dim is not
  // divisible by group_size or bits/group_size are unsupported.
  Result<std::unique_ptr<QuantizedKVCache>> ToQuantized(
      int group_size = 64, int bits = 4,
      QuantizeOptions::Rounding rounding = QuantizeOptions::Rounding::kCpu) const;

  // The physical buffers (spare capacity included); undefined when empty.
  const Array& keys_buffer() const;
  const Array& values_buffer() const;

 private:
  std::shared_ptr<KVBuffers> buffers_;  // never null; owned, shared only with snapshots
  int64_t offset_ = 0;
};

// mlx-lm's ConcatenateKVCache: every update concatenates onto the arrays
// (promoting mixed float dtypes, as MLX does). Trim only lowers offset (the
// arrays are not cut), as upstream does; see docs/compat.md.
class ConcatenateKVCache : public Cache {
 public:
  ConcatenateKVCache();
  std::string_view class_name() const override { return "ConcatenateKVCache"; }
  std::unique_ptr<Cache> Copy() const override;

  Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values) override;
  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  // As State(), except that an empty cache is refused: mlx-lm 0.32 would
  // save None and then fail to load it.
  Result<CacheState> FullState() const override;

  std::optional<int64_t> offset() const override { return offset_; }
  bool Empty() const override;
  Result<int64_t> Nbytes() const override;
  bool IsTrimmable() const override { return true; }
  Result<int64_t> Trim(int64_t n) override;
  Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const override;

 private:
  std::shared_ptr<KVBuffers> buffers_;  // never null; replaced, never written in place
  int64_t offset_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_KV_CACHE_H_
