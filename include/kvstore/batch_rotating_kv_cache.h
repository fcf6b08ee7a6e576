// BatchRotatingKVCache: mlx-lm's batched sliding-window cache (no keep).
#ifndef KVSTORE_BATCH_ROTATING_KV_CACHE_H_
#define KVSTORE_BATCH_ROTATING_KV_CACHE_H_

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore {

// state = [keys, values, offset I32[B], left_padding I32[B]];
// meta_state = [max_size, _offset, _idx, "True"/"False" (rotated)].
// SetMetaState reproduces mlx-lm's bool(str) parse of the rotated flag
// (any non-empty string is true); see docs/compat.md.
class BatchRotatingKVCache : public Cache {
 public:
  static constexpr int64_t kStep = 256;

  BatchRotatingKVCache(int64_t max_size, std::vector<int32_t> left_padding);
  std::string_view class_name() const override { return "BatchRotatingKVCache"; }
  std::unique_ptr<Cache> Copy() const override;

  Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values) override;
  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  MetaState meta_state() const override;
  Status SetMetaState(const MetaState& meta) override;
  Status CheckSavedState() const override;
  // mlx-lm 0.32: [keys, values, offset, left_padding, max_size, _offset,
  // _idx, rotated (a bool)], whole buffers.
  Result<CacheState> FullState() const override;
  Status SetFullState(const CacheState& state) override;

  Array offsets() const;
  Array left_padding() const;
  int64_t max_size() const { return max_size_; }

  int64_t Size() const override;  // min(_offset, max_size)
  bool Empty() const override;
  Result<int64_t> Nbytes() const override;
  bool IsTrimmable() const override { return seq_offset_ < max_size_; }
  Result<int64_t> Trim(int64_t n) override;
  Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const override;

  Status Prepare(const PrepareArgs& args) override;
  Status Finalize() override;
  Status Filter(std::span<const int64_t> batch_indices) override;
  Status Extend(Cache& other) override;
  // A RotatingKVCache(max_size) holding row `index`.
  Result<std::unique_ptr<Cache>> Extract(int64_t index) const override;
  Status DescribeSpec(CacheSpec& spec) const override;
  // mlx-lm RotatingKVCache.merge; all inputs must share max_size.
  static Result<std::unique_ptr<BatchRotatingKVCache>> Merge(std::span<const Cache* const> caches);

 private:
  // mlx-lm's _update_concat (S > 1) and _update_in_place (S == 1), called
  // once the update has been checked.
  Result<KeysValues> UpdateConcat(const Array& keys, const Array& values);
  Result<KeysValues> UpdateInPlace(const Array& keys, const Array& values);

  int64_t max_size_;
  std::vector<int32_t> offset_;
  std::vector<int32_t> left_padding_;
  std::optional<std::vector<int32_t>> lengths_;
  int64_t idx_ = 0;
  int64_t seq_offset_ = 0;  // mlx-lm's _offset
  bool rotated_ = false;
  // The restored meta_state's flag when it was not "True" or "False" (CheckSavedState).
  std::optional<std::string> odd_rotated_text_;
  std::shared_ptr<KVBuffers> buffers_;  // never null
};

}  // namespace kvstore

#endif  // KVSTORE_BATCH_ROTATING_KV_CACHE_H_
