// QuantizedKVCache: mlx-lm's cache that stores keys and values as MLX affine
// quantized triples (packed U32, scales, biases).
#ifndef KVSTORE_QUANTIZED_KV_CACHE_H_
#define KVSTORE_QUANTIZED_KV_CACHE_H_

#include <memory>
#include <utility>

#include "kvstore/cache.h"
#include "kvstore/quantize.h"

namespace kvstore {

struct QuantizedKeysValues {
  QuantizedArray keys;
  QuantizedArray values;
};

// state = [[wq, scales, biases] for keys, [...] for values], sliced to offset
// unless offset == capacity; meta_state = [offset, group_size, bits].
class QuantizedKVCache : public Cache {
 public:
  static constexpr int64_t kStep = 256;

  // REQUIRES: IsSupportedQuantization(bits, group_size).
  explicit QuantizedKVCache(int group_size = 64, int bits = 8,
                            QuantizeOptions::Rounding rounding = QuantizeOptions::Rounding::kCpu);
  std::string_view class_name() const override { return "QuantizedKVCache"; }
  std::unique_ptr<Cache> Copy() const override;

  // Quantizes and appends S positions; returns the quantized triples up to
  // offset. Error for float inputs whose head dim is not divisible by the
  // group size (and, like mlx-lm, for 3/5/6 bits where its buffer width
  // D / (32 / bits) differs from the packed width; see docs/compat.md).
  Result<QuantizedKeysValues> UpdateAndFetchQuantized(const Array& keys, const Array& values);
  // NotSupported: quantized caches return triples, use UpdateAndFetchQuantized.
  Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values) override;

  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  MetaState meta_state() const override;
  Status SetMetaState(const MetaState& meta) override;
  // [keys triple, values triple, offset, group_size, bits]: the whole
  // buffers; None, None when empty.
  Result<CacheState> FullState() const override;
  Status SetFullState(const CacheState& state) override;
  Status CheckSavedState() const override;

  std::optional<int64_t> offset() const override { return offset_; }
  int64_t Size() const override { return 0; }  // mlx-lm does not override size()
  bool Empty() const override;
  Result<int64_t> Nbytes() const override;  // error when empty, as upstream
  bool IsTrimmable() const override { return true; }
  Result<int64_t> Trim(int64_t n) override;
  Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const override;
  Status DescribeSpec(CacheSpec& spec) const override;
  std::optional<TokenRows> RowsByPosition() const override;
  Status RestoreRows(const CacheSpec& spec, std::span<const Array> rows) override;

  int group_size() const { return group_size_; }
  int bits() const { return bits_; }

  struct Buffers;  // opaque: the six copy-on-write arrays (libkvstore internal)

 private:
  friend class KVCache;  // ToQuantized fills the buffers directly
  int group_size_;
  int bits_;
  QuantizeOptions::Rounding rounding_;
  int64_t offset_ = 0;
  std::shared_ptr<Buffers> buffers_;
};

}  // namespace kvstore

#endif  // KVSTORE_QUANTIZED_KV_CACHE_H_
