// BatchKVCache: mlx-lm's left-padded batch of growing caches.
#ifndef KVSTORE_BATCH_KV_CACHE_H_
#define KVSTORE_BATCH_KV_CACHE_H_

#include <memory>
#include <span>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore {

// Sequences are left-padded to a common length; offset is per sequence.
// state = [keys, values, offset I32[B], left_padding I32[B]]; meta_state = "".
class BatchKVCache : public Cache {
 public:
  static constexpr int64_t kStep = 256;

  explicit BatchKVCache(std::vector<int32_t> left_padding);
  std::string_view class_name() const override { return "BatchKVCache"; }
  std::unique_ptr<Cache> Copy() const override;

  Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values) override;
  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  // mlx-lm 0.32: [keys, values, offset, left_padding, _idx], whole buffers.
  Result<CacheState> FullState() const override;
  Status SetFullState(const CacheState& state) override;

  // Per-sequence offsets and left padding, I32 [B].
  Array offsets() const;
  Array left_padding() const;
  int64_t idx() const { return idx_; }  // mlx-lm's _idx: padded length

  int64_t Size() const override { return idx_; }
  bool Empty() const override;
  Result<int64_t> Nbytes() const override;
  bool IsTrimmable() const override { return true; }
  Result<int64_t> Trim(int64_t n) override;
  // create_causal_mask(N, offset=_idx, left_padding, window_size): always an
  // array [B, 1, N, _idx + N].
  Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const override;

  Status Prepare(const PrepareArgs& args) override;
  Status Finalize() override;
  Status Filter(std::span<const int64_t> batch_indices) override;
  Status Extend(Cache& other) override;
  // A plain KVCache holding row `index` without its padding.
  Result<std::unique_ptr<Cache>> Extract(int64_t index) const override;
  // Left-pads KVCache-like caches into one batch (mlx-lm KVCache.merge).
  static Result<std::unique_ptr<BatchKVCache>> Merge(std::span<const Cache* const> caches);

 private:
  std::vector<int32_t> offset_;
  std::vector<int32_t> left_padding_;
  std::optional<std::vector<int32_t>> right_padding_;
  int64_t idx_ = 0;
  std::shared_ptr<KVBuffers> buffers_;  // never null
};

}  // namespace kvstore

#endif  // KVSTORE_BATCH_KV_CACHE_H_
