// Defaults of the Cache interface: mlx-lm's _BaseCache behaviour, and
// NotSupported for members a Python class does not have.
#include "kvstore/cache.h"

#include <string>

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

}  // namespace kvstore
