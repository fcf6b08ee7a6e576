// CacheList: several caches serving one layer (e.g. an SSM ArraysCache plus
// an attention KVCache), mlx-lm's CacheList.
#ifndef KVSTORE_CACHE_LIST_H_
#define KVSTORE_CACHE_LIST_H_

#include <memory>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore {

// Children are shared references, as in Python: updating a child through its
// own handle is visible through the list. Copy() deep-copies the children.
// An operation applies to every child or to none: it is tried on copies of
// the children first (upstream stops at the first failing child, leaving the
// ones before it changed).
// state = [child state, ...]; meta_state = [[child class names], [child metas]].
class CacheList : public Cache {
 public:
  explicit CacheList(std::vector<std::shared_ptr<Cache>> children);
  std::string_view class_name() const override { return "CacheList"; }
  std::unique_ptr<Cache> Copy() const override;

  size_t num_children() const { return children_.size(); }
  // REQUIRES: i < num_children().
  const std::shared_ptr<Cache>& child(size_t i) const { return children_[i]; }

  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  MetaState meta_state() const override;
  Status SetMetaState(const MetaState& meta) override;
  Status CheckSavedState() const override;
  // mlx-lm 0.32: [[child state, child class name], ...], each child's
  // FullState under the class name a file saves it as (CacheClassInfo).
  Result<CacheState> FullState() const override;
  // Rebuilds the children from their names, as 0.32's setter does.
  Status SetFullState(const CacheState& state) override;
  static Result<std::unique_ptr<CacheList>> FromFullState(const CacheState& state);
  // Builds the children from their class names (meta[0]) like mlx-lm's
  // CacheList.from_state. Nesting depth is capped.
  static Result<std::unique_ptr<CacheList>> FromState(const CacheState& state,
                                                      const MetaState& meta);

  int64_t Size() const override;  // max over children
  bool Empty() const override;    // first child's
  Result<int64_t> Nbytes() const override;
  bool IsTrimmable() const override;
  // Trims every child by n (each trims what it can: min(n, what it holds))
  // and returns the last child's count, as mlx-lm's CacheList.trim. Children
  // holding different token counts trim different amounts, so the count says
  // nothing about the others: a caller that needs every child to have given
  // back exactly n checks each child (e.g. its offset()).
  // InvalidArgument without children.
  Result<int64_t> Trim(int64_t n) override;

  Status Prepare(const PrepareArgs& args) override;
  Status Finalize() override;
  Status Filter(std::span<const int64_t> batch_indices) override;
  Status Extend(Cache& other) override;
  Result<std::unique_ptr<Cache>> Extract(int64_t index) const override;
  Status DescribeSpec(CacheSpec& spec) const override;  // each child's spec
  std::span<const std::shared_ptr<Cache>> children() const override { return children_; }
  static Result<std::unique_ptr<CacheList>> Merge(std::span<const Cache* const> caches);

 private:
  std::vector<std::shared_ptr<Cache>> children_;
};

}  // namespace kvstore

#endif  // KVSTORE_CACHE_LIST_H_
