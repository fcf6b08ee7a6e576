// CacheList: several caches for one layer (spec §8).
#include "kvstore/cache_list.h"

#include <string>

#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"

namespace kvstore {

namespace {
constexpr size_t kMaxChildren = 4096;

Status Bad(const std::string& rule) { return Status::InvalidArgument("CacheList: " + rule); }

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

CacheList::CacheList(std::vector<std::shared_ptr<Cache>> children) : children_(std::move(children)) {}

std::unique_ptr<Cache> CacheList::Copy() const {
  std::vector<std::shared_ptr<Cache>> copies;
  for (const auto& c : children_) copies.push_back(std::shared_ptr<Cache>(c->Copy()));
  return std::make_unique<CacheList>(std::move(copies));
}

Result<CacheState> CacheList::State() const {
  CacheState::List out;
  for (const auto& c : children_) {
    KV_ASSIGN_OR_RETURN(CacheState s, c->State());
    out.push_back(std::move(s));
  }
  return CacheState(std::move(out));
}

// Child setters are applied to copies first, so a failure leaves every
// child (which other owners may share) untouched.
Status CacheList::SetState(const CacheState& state) {
  if (!state.is_list()) return Bad("state must be a list of child states");
  const size_t n = std::min(state.size(), children_.size());
  for (size_t i = 0; i < n; ++i) {
    std::unique_ptr<Cache> probe = children_[i]->Copy();
    KV_RETURN_IF_ERROR(probe->SetState(state[i]).WithPrefix("CacheList child " + std::to_string(i)));
  }
  for (size_t i = 0; i < n; ++i) KV_RETURN_IF_ERROR(children_[i]->SetState(state[i]));
  return Status::OK();
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
    return Bad("meta_state must be [[class names], [child metas]]");
  }
  const size_t n = std::min(meta[1].size(), children_.size());
  for (size_t i = 0; i < n; ++i) {
    std::unique_ptr<Cache> probe = children_[i]->Copy();
    KV_RETURN_IF_ERROR(probe->SetMetaState(meta[1][i]).WithPrefix("CacheList child " + std::to_string(i)));
  }
  for (size_t i = 0; i < n; ++i) KV_RETURN_IF_ERROR(children_[i]->SetMetaState(meta[1][i]));
  return Status::OK();
}

Result<std::unique_ptr<CacheList>> CacheList::FromState(const CacheState& state, const MetaState& meta) {
  if (!state.is_list()) return Bad("state must be a list of child states");
  if (!meta.is_list() || meta.size() != 2 || !meta[0].is_list() || !meta[1].is_list()) {
    return Bad("meta_state must be [[class names], [child metas]]");
  }
  const MetaState& names = meta[0];
  const MetaState& metas = meta[1];
  if (names.size() != state.size() || metas.size() != state.size()) {
    return Bad("state has " + std::to_string(state.size()) + " children but meta_state names " +
               std::to_string(names.size()) + " classes and " + std::to_string(metas.size()) + " metas");
  }
  if (state.size() > kMaxChildren) return Bad("too many children");
  std::vector<std::shared_ptr<Cache>> children;
  for (size_t i = 0; i < state.size(); ++i) {
    if (!names[i].is_string()) return Bad("class name " + std::to_string(i) + " is not a string");
    Result<std::unique_ptr<Cache>> child = CacheFromState(names[i].str(), state[i], metas[i]);
    if (!child.ok()) return child.status().WithPrefix("CacheList child " + std::to_string(i));
    children.push_back(std::shared_ptr<Cache>(std::move(child).value()));
  }
  return std::make_unique<CacheList>(std::move(children));
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
  if (children_.empty()) return Bad("trim of a CacheList without children");
  int64_t last = 0;
  for (const auto& c : children_) {
    KV_ASSIGN_OR_RETURN(last, c->Trim(n));
  }
  return last;  // the last child's count, as upstream
}

Status CacheList::Prepare(const PrepareArgs& args) {
  for (const auto& c : children_) KV_RETURN_IF_ERROR(c->Prepare(args));
  return Status::OK();
}

Status CacheList::Finalize() {
  for (const auto& c : children_) KV_RETURN_IF_ERROR(c->Finalize());
  return Status::OK();
}

Status CacheList::Filter(std::span<const int64_t> batch_indices) {
  for (const auto& c : children_) KV_RETURN_IF_ERROR(c->Filter(batch_indices));
  return Status::OK();
}

Status CacheList::Extend(Cache& other_cache) {
  auto* other = dynamic_cast<CacheList*>(&other_cache);
  if (other == nullptr || other->children_.size() != children_.size()) {
    return Bad("extend needs a CacheList with as many children");
  }
  for (size_t i = 0; i < children_.size(); ++i) KV_RETURN_IF_ERROR(children_[i]->Extend(*other->children_[i]));
  return Status::OK();
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
  if (caches.empty()) return Bad("merge of no caches");
  std::vector<const CacheList*> lists;
  for (const Cache* c : caches) {
    auto* l = dynamic_cast<const CacheList*>(c);
    if (l == nullptr) return Bad("merge needs CacheList inputs");
    lists.push_back(l);
  }
  std::vector<std::shared_ptr<Cache>> merged;
  for (size_t i = 0; i < lists[0]->children_.size(); ++i) {
    std::vector<const Cache*> group;
    for (const CacheList* l : lists) {
      if (i >= l->children_.size()) return Bad("merge: child counts differ");
      group.push_back(l->children_[i].get());
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> m, MergeLike(*lists[0]->children_[i], group));
    merged.push_back(std::shared_ptr<Cache>(std::move(m)));
  }
  return std::make_unique<CacheList>(std::move(merged));
}

}  // namespace kvstore
