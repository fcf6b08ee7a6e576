// CacheList: several caches for one layer, as mlx-lm's CacheList.
#include "kvstore/cache_list.h"

#include <functional>
#include <string>

#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/cache/batch_util.h"

namespace kvstore {

namespace {
constexpr size_t kMaxChildren = 4096;

Status BadCacheList(const std::string& rule) {
  return Status::InvalidArgument("CacheList: " + rule);
}

using ChildOp = std::function<Status(Cache& child, size_t i, bool probe)>;

// Runs `op` on every child, all or nothing. Children may be shared with
// other owners, so a failure must leave each of them untouched: `op` runs
// first on copies of children 1..n-1 (probe), then on the children in
// order. Child 0 is not probed: when it fails, nothing has changed yet, and
// the others then see the same state their copies had.
Status ForEachChild(const std::vector<std::shared_ptr<Cache>>& children, const ChildOp& op) {
  for (size_t i = 1; i < children.size(); ++i) {
    std::unique_ptr<Cache> copy = children[i]->Copy();
    KV_RETURN_IF_ERROR(op(*copy, i, true).WithPrefix("CacheList child " + std::to_string(i)));
  }
  for (size_t i = 0; i < children.size(); ++i) {
    KV_RETURN_IF_ERROR(
        op(*children[i], i, false).WithPrefix("CacheList child " + std::to_string(i)));
  }
  return Status::OK();
}

// type(first).merge(group), as Python dispatches on the first child's class.
Result<std::unique_ptr<Cache>> MergeLike(const Cache& first, std::span<const Cache* const> group) {
  const std::string_view name = first.class_name();
  if (name == "KVCache" || name == "BatchKVCache") {
    KV_ASSIGN_OR_RETURN(auto m, BatchKVCache::Merge(group));
    return std::unique_ptr<Cache>(std::move(m));
  }
  if (name == "RotatingKVCache" || name == "BatchRotatingKVCache") {
    KV_ASSIGN_OR_RETURN(auto m, BatchRotatingKVCache::Merge(group));
    return std::unique_ptr<Cache>(std::move(m));
  }
  if (name == "ArraysCache" || name == "MambaCache") {
    KV_ASSIGN_OR_RETURN(auto m, ArraysCache::Merge(group));
    return std::unique_ptr<Cache>(std::move(m));
  }
  if (name == "CacheList") {
    KV_ASSIGN_OR_RETURN(auto m, CacheList::Merge(group));
    return std::unique_ptr<Cache>(std::move(m));
  }
  return Status::NotSupported(std::string(name) + " has no merge");
}
}  // namespace

CacheList::CacheList(std::vector<std::shared_ptr<Cache>> children)
    : children_(std::move(children)) {}

std::unique_ptr<Cache> CacheList::Copy() const {
  std::vector<std::shared_ptr<Cache>> copies;
  for (const auto& c : children_) copies.push_back(std::shared_ptr<Cache>(c->Copy()));
  return std::make_unique<CacheList>(std::move(copies));
}

Result<CacheState> CacheList::State() const {
  CacheState::List out;
  out.reserve(children_.size());
  for (const auto& c : children_) {
    // Moved straight out of the Result: GCC 12 at -O3 reports a
    // maybe-uninitialized variant for a named intermediate CacheState.
    Result<CacheState> s = c->State();
    if (!s.ok()) return s.status();
    out.push_back(std::move(s).value());
  }
  return CacheState(std::move(out));
}

Status CacheList::SetState(const CacheState& state) {
  if (!state.is_list()) return BadCacheList("state must be a list of child states");
  return ForEachChild(children_, [&](Cache& c, size_t i, bool) {
    return i < state.size() ? c.SetState(state[i]) : Status::OK();  // zip() stops at the shorter
  });
}

MetaState CacheList::meta_state() const {
  MetaState::List names, metas;
  for (const auto& c : children_) {
    names.emplace_back(std::string(c->class_name()));
    metas.push_back(c->meta_state());
  }
  return MetaState({MetaState(std::move(names)), MetaState(std::move(metas))});
}

Status CacheList::SetMetaState(const MetaState& meta) {
  if (!meta.is_list() || meta.size() != 2 || !meta[1].is_list()) {
    return BadCacheList("meta_state must be [[class names], [child metas]]");
  }
  const MetaState& metas = meta[1];
  return ForEachChild(children_, [&](Cache& c, size_t i, bool) {
    return i < metas.size() ? c.SetMetaState(metas[i]) : Status::OK();
  });
}

Status CacheList::CheckSavedState() const {
  for (size_t i = 0; i < children_.size(); ++i) {
    KV_RETURN_IF_ERROR(children_[i]->CheckSavedState().WithPrefix("CacheList child " + std::to_string(i)));
  }
  return Status::OK();
}

Result<std::unique_ptr<CacheList>> CacheList::FromState(const CacheState& state,
                                                        const MetaState& meta) {
  if (!state.is_list()) return BadCacheList("state must be a list of child states");
  if (!meta.is_list() || meta.size() != 2 || !meta[0].is_list() || !meta[1].is_list()) {
    return BadCacheList("meta_state must be [[class names], [child metas]]");
  }
  const MetaState& names = meta[0];
  const MetaState& metas = meta[1];
  if (names.size() != state.size() || metas.size() != state.size()) {
    return BadCacheList("state has " + std::to_string(state.size()) +
                        " children but meta_state names " + std::to_string(names.size()) +
                        " classes and " + std::to_string(metas.size()) + " metas");
  }
  if (state.size() > kMaxChildren) return BadCacheList("too many children");
  std::vector<std::shared_ptr<Cache>> children;
  for (size_t i = 0; i < state.size(); ++i) {
    if (!names[i].is_string())
      return BadCacheList("class name " + std::to_string(i) + " is not a string");
    Result<std::unique_ptr<Cache>> child = CacheFromState(names[i].str(), state[i], metas[i]);
    if (!child.ok()) return child.status().WithPrefix("CacheList child " + std::to_string(i));
    children.push_back(std::shared_ptr<Cache>(std::move(child).value()));
  }
  return std::make_unique<CacheList>(std::move(children));
}

Result<CacheState> CacheList::FullState() const {
  CacheState::List out;
  for (size_t i = 0; i < children_.size(); ++i) {
    Result<CacheState> s = children_[i]->FullState();
    if (!s.ok()) return s.status().WithPrefix("CacheList child " + std::to_string(i));
    const CacheClassInfo* info = FindCacheClass(children_[i]->class_name());
    const std::string_view name = info != nullptr ? info->saved_as : children_[i]->class_name();
    out.push_back(CacheState({std::move(s).value(), CacheState::String(std::string(name))}));
  }
  return CacheState(std::move(out));
}

Result<std::unique_ptr<CacheList>> CacheList::FromFullState(const CacheState& state) {
  if (!state.is_list()) return BadCacheList("mlx-lm 0.32 state must be a list of [child state, class name]");
  if (state.size() > kMaxChildren) return BadCacheList("too many children");
  std::vector<std::shared_ptr<Cache>> children;
  for (size_t i = 0; i < state.size(); ++i) {
    const CacheState& item = state[i];
    if (!item.is_list() || item.size() != 2 || !item[1].is_string()) {
      return BadCacheList("mlx-lm 0.32 child " + std::to_string(i) + " must be [state, class name]");
    }
    Result<std::unique_ptr<Cache>> child = CacheFromFullState(item[1].str(), item[0]);
    if (!child.ok()) return child.status().WithPrefix("CacheList child " + std::to_string(i));
    children.push_back(std::shared_ptr<Cache>(std::move(child).value()));
  }
  return std::make_unique<CacheList>(std::move(children));
}

Status CacheList::SetFullState(const CacheState& state) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<CacheList> built, FromFullState(state));
  children_ = std::move(built->children_);
  return Status::OK();
}

int64_t CacheList::Size() const {
  int64_t m = 0;
  for (const auto& c : children_) m = std::max(m, c->Size());
  return m;
}

bool CacheList::Empty() const { return children_.empty() || children_[0]->Empty(); }

Result<int64_t> CacheList::Nbytes() const {
  int64_t n = 0;
  for (const auto& c : children_) {
    KV_ASSIGN_OR_RETURN(int64_t b, c->Nbytes());
    n += b;
  }
  return n;
}

bool CacheList::IsTrimmable() const {
  for (const auto& c : children_) {
    if (!c->IsTrimmable()) return false;
  }
  return true;
}

Result<int64_t> CacheList::Trim(int64_t n) {
  if (children_.empty()) return BadCacheList("trim of a CacheList without children");
  int64_t last = 0;
  KV_RETURN_IF_ERROR(ForEachChild(children_, [&](Cache& c, size_t, bool) {
    Result<int64_t> trimmed = c.Trim(n);
    if (trimmed.ok()) last = *trimmed;
    return trimmed.status();
  }));
  return last;
}

Status CacheList::Prepare(const PrepareArgs& args) {
  return ForEachChild(children_, [&](Cache& c, size_t, bool) { return c.Prepare(args); });
}

Status CacheList::Finalize() {
  return ForEachChild(children_, [](Cache& c, size_t, bool) { return c.Finalize(); });
}

Status CacheList::Filter(std::span<const int64_t> batch_indices) {
  return ForEachChild(children_, [&](Cache& c, size_t, bool) { return c.Filter(batch_indices); });
}

// A probe extends by a copy too: BatchRotatingKVCache reorders its argument.
Status CacheList::Extend(Cache& other_cache) {
  auto* other = dynamic_cast<CacheList*>(&other_cache);
  if (other == nullptr || other->children_.size() != children_.size()) {
    return BadCacheList("extend needs a CacheList with as many children");
  }
  return ForEachChild(children_, [&](Cache& c, size_t i, bool probe) {
    Cache& theirs = *other->children_[i];
    if (!probe) return c.Extend(theirs);
    std::unique_ptr<Cache> copy = theirs.Copy();
    return c.Extend(*copy);
  });
}

Result<std::unique_ptr<Cache>> CacheList::Extract(int64_t index) const {
  std::vector<std::shared_ptr<Cache>> out;
  for (const auto& c : children_) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> e, c->Extract(index));
    out.push_back(std::shared_ptr<Cache>(std::move(e)));
  }
  return std::unique_ptr<Cache>(std::make_unique<CacheList>(std::move(out)));
}

Result<std::unique_ptr<CacheList>> CacheList::Merge(std::span<const Cache* const> caches) {
  if (caches.empty()) return BadCacheList("merge of no caches");
  KV_ASSIGN_OR_RETURN(std::vector<const CacheList*> lists,
                      Downcast<CacheList>("CacheList", "CacheList", caches));
  std::vector<std::shared_ptr<Cache>> merged;
  for (size_t i = 0; i < lists[0]->children_.size(); ++i) {
    std::vector<const Cache*> group;
    for (const CacheList* l : lists) {
      if (i >= l->children_.size()) return BadCacheList("merge: child counts differ");
      group.push_back(l->children_[i].get());
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> m, MergeLike(*lists[0]->children_[i], group));
    merged.push_back(std::shared_ptr<Cache>(std::move(m)));
  }
  return std::make_unique<CacheList>(std::move(merged));
}

Status CacheList::DescribeSpec(CacheSpec& spec) const {
  for (size_t c = 0; c < children_.size(); ++c) {
    CacheSpec child{.class_name = std::string(children_[c]->class_name())};
    Status s = children_[c]->DescribeSpec(child);
    if (!s.ok()) return s.WithPrefix("child " + std::to_string(c));
    spec.children.push_back(std::move(child));
  }
  return Status::OK();
}

}  // namespace kvstore
