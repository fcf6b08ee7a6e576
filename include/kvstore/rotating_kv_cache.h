// RotatingKVCache: mlx-lm's sliding-window cache that keeps the first `keep`
// positions forever and at most `max_size` positions during decode.
#ifndef KVSTORE_ROTATING_KV_CACHE_H_
#define KVSTORE_ROTATING_KV_CACHE_H_

#include <memory>

#include "kvstore/cache.h"

namespace kvstore {

// Single-token updates write in place at a wrapping index (O(1)); multi-token
// updates put the buffer in temporal order, drop the oldest non-kept
// positions and concatenate (the result may hold up to max_size + S - 1
// positions). state = the physical buffer in rotated order (its first offset
// rows while offset < buffer length); meta_state = [keep, max_size, offset, _idx].
class RotatingKVCache : public Cache {
 public:
  static constexpr int64_t kStep = 256;

  // REQUIRES: max_size >= 1, 0 <= keep.
  explicit RotatingKVCache(int64_t max_size, int64_t keep = 0);
  std::string_view class_name() const override { return "RotatingKVCache"; }
  std::unique_ptr<Cache> Copy() const override;

  Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values) override;
  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  MetaState meta_state() const override;
  Status SetMetaState(const MetaState& meta) override;
  Status CheckSavedState() const override;
  // [keys, values, offset, keep, max_size, _idx]: the whole buffers.
  Result<CacheState> FullState() const override;
  Status SetFullState(const CacheState& state) override;

  std::optional<int64_t> offset() const override { return offset_; }
  int64_t Size() const override;  // min(offset, max_size)
  bool Empty() const override;
  Result<int64_t> Nbytes() const override;
  bool IsTrimmable() const override { return offset_ < max_size_; }
  Result<int64_t> Trim(int64_t n) override;
  Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const override;
  Status DescribeSpec(CacheSpec& spec) const override;
  std::optional<TokenRows> RowsByPosition() const override;
  Status RestoreRows(const CacheSpec& spec, std::span<const Array> rows) override;

  int64_t max_size() const { return max_size_; }
  int64_t keep() const { return keep_; }
  int64_t idx() const { return idx_; }  // mlx-lm's _idx: the write pointer
  // The physical buffers (rotated order, spare capacity included).
  const Array& keys_buffer() const;
  const Array& values_buffer() const;

 private:
  int64_t max_size_;
  int64_t keep_;
  int64_t offset_ = 0;
  int64_t idx_ = 0;
  std::shared_ptr<KVBuffers> buffers_;  // never null
};

}  // namespace kvstore

#endif  // KVSTORE_ROTATING_KV_CACHE_H_
