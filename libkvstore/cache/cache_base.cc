// Defaults of the Cache interface: mlx-lm's _BaseCache behaviour, and
// NotSupported for members a Python class does not have.
#include "kvstore/cache.h"

#include <string>

#include "libkvstore/cache/attention_state.h"

namespace kvstore {

Status Cache::Unsupported(std::string_view member) const {
  std::string msg(class_name());
  msg += " has no ";
  msg += member;
  return Status::NotSupported(msg);
}

Result<KeysValues> Cache::UpdateAndFetch(const Array&, const Array&) {
  return Unsupported("update_and_fetch");
}

// _BaseCache.state is the empty list.
Result<CacheState> Cache::State() const { return CacheState(CacheState::List{}); }

Status Cache::SetState(const CacheState& state) {
  if (state.is_none() || (state.is_list() && state.size() == 0)) return Status::OK();
  return Status::InvalidArgument(std::string(class_name()) +
                                 ": this cache has no state and cannot be assigned one");
}

MetaState Cache::meta_state() const { return MetaState(""); }

// _BaseCache accepts only a falsy meta state ("" or an empty list).
Status Cache::SetMetaState(const MetaState& meta) {
  if (!meta.truthy()) return Status::OK();
  return Status::InvalidArgument(std::string(class_name()) +
                                 ": this cache has no meta state and cannot be assigned " +
                                 meta.DebugString());
}

Result<int64_t> Cache::Trim(int64_t) { return Unsupported("trim"); }

Result<Mask> Cache::MakeMask(int64_t, const MaskOptions&) const { return Unsupported("make_mask"); }

Status Cache::Prepare(const PrepareArgs&) { return Unsupported("prepare"); }
Status Cache::Finalize() { return Unsupported("finalize"); }
Status Cache::Filter(std::span<const int64_t>) { return Unsupported("filter"); }
Status Cache::Extend(Cache&) { return Unsupported("extend"); }
Result<std::unique_ptr<Cache>> Cache::Extract(int64_t) const { return Unsupported("extract"); }

namespace {

// Keys/values [B, H, S, D] of a state whose first two entries are arrays.
Status AttentionDims(const Cache& cache, const CacheState& state, CacheSpec& spec) {
  if (state.size() < 2 || !state[0].is_array() || !state[1].is_array() || state[0].array().ndim() != 4 ||
      state[1].array().ndim() != 4) {
    return UnknownShapes(cache, "has no [B, H, S, D] keys and values");
  }
  spec.dtype = state[0].array().dtype();
  spec.kv_heads = state[0].array().dim(1);
  spec.k_head_dim = state[0].array().dim(3);
  spec.v_head_dim = state[1].array().dim(3);
  return Status::OK();
}

// Each slot's dtype and shape without the batch axis.
Status SlotsOf(const Cache& cache, const CacheState& state, CacheSpec& spec) {
  if (state.size() < 1 || !state[0].is_list()) return UnknownShapes(cache, "has no slot list");
  for (size_t i = 0; i < state[0].size(); ++i) {
    const CacheState& slot = state[0][i];
    if (!slot.is_array() || slot.array().ndim() < 1) {
      return UnknownShapes(cache, "slot " + std::to_string(i) + " is None");
    }
    const Shape& shape = slot.array().shape();
    spec.slots.push_back(SlotSpec{slot.array().dtype(), Shape(shape.begin() + 1, shape.end())});
  }
  return Status::OK();
}

}  // namespace

Status Cache::DescribeSpec(CacheSpec& spec) const {
  Result<CacheState> state = State();
  if (!state.ok()) return UnknownShapes(*this, "has no state (" + std::string(state.status().message()) + ")");
  const CacheClassInfo* info = FindCacheClass(class_name());
  if (info != nullptr && info->slots) return SlotsOf(*this, *state, spec);
  if (info != nullptr && info->attention && !info->quantized) return AttentionDims(*this, *state, spec);
  return Status::NotSupported("no fingerprint rule for class " + std::string(class_name()));
}

Status Cache::RestoreRows(const CacheSpec&, std::span<const Array>) { return Unsupported("token rows"); }

}  // namespace kvstore
