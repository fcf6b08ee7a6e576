// ArraysCache (and the legacy MambaCache name): a fixed number of arbitrary
// arrays ("slots") for recurrent / SSM layers; axis 0 of every slot is batch.
#ifndef KVSTORE_ARRAYS_CACHE_H_
#define KVSTORE_ARRAYS_CACHE_H_

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore {

// state = [[slot0, slot1, ...], left_padding, lengths] where a missing
// left_padding/lengths is an empty F32 array of shape [0] and a None slot is
// CacheState::None(); meta_state = "". SetState also reads the legacy flat
// layout [slot0, slot1, ...] written by mlx-lm before 2026-08-22 when
// `legacy_layout` is requested (the file layer detects it).
class ArraysCache : public Cache {
 public:
  // Slot counts above this are refused when restoring (caps hostile input).
  static constexpr size_t kMaxSlots = 4096;

  // REQUIRES: size <= kMaxSlots. An empty left_padding leaves it None.
  explicit ArraysCache(size_t size, std::vector<int32_t> left_padding = {});
  std::string_view class_name() const override { return "ArraysCache"; }
  std::unique_ptr<Cache> Copy() const override;

  size_t num_slots() const { return slots_.size(); }
  // Slot i (nullopt = None). REQUIRES: i < num_slots().
  const std::optional<Array>& slot(size_t i) const { return slots_[i]; }
  // OutOfRange-like InvalidArgument when i >= num_slots().
  Status SetSlot(size_t i, std::optional<Array> value);

  // Python None when unset.
  const std::optional<Array>& left_padding() const { return left_padding_; }
  const std::optional<Array>& lengths() const { return lengths_; }
  int64_t batch_size() const;
  // Subtracts n from lengths and left_padding where present.
  Status Advance(int64_t n);

  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  // Reads the pre-2026-08-22 flat slot list.
  Status SetLegacyState(const CacheState& flat_slots);
  // mlx-lm 0.32: [[slots], left_padding, lengths] with None for an absent
  // padding (instead of the empty placeholder).
  Result<CacheState> FullState() const override;
  Status SetFullState(const CacheState& state) override;

  bool Empty() const override;
  Result<int64_t> Nbytes() const override;
  // (B, N) BOOL from left_padding, else from lengths, else None.
  Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const override;

  Status Prepare(const PrepareArgs& args) override;  // needs lengths, like upstream
  Status Finalize() override;
  Status Filter(std::span<const int64_t> batch_indices) override;
  Status Extend(Cache& other) override;
  Result<std::unique_ptr<Cache>> Extract(int64_t index) const override;

  // mlx-lm's ArraysCache.merge: one batch row per input cache.
  static Result<std::unique_ptr<ArraysCache>> Merge(std::span<const Cache* const> caches);

 protected:
  std::vector<std::optional<Array>> slots_;
  std::optional<Array> left_padding_;  // I32 [B]
  std::optional<Array> lengths_;       // I32 [B]
};

// The legacy 2-slot ArraysCache that mlx-lm removed in 2026-02 and
// mlx-swift-lm still writes. Identical behaviour; only the class name differs.
class MambaCache : public ArraysCache {
 public:
  explicit MambaCache(std::vector<int32_t> left_padding = {})
      : ArraysCache(2, std::move(left_padding)) {}
  std::string_view class_name() const override { return "MambaCache"; }
  std::unique_ptr<Cache> Copy() const override;
};

}  // namespace kvstore

#endif  // KVSTORE_ARRAYS_CACHE_H_
