#include "libkvstore/cache/cache_leaves.h"

#include <functional>
#include <string>

#include "kvstore/cache_list.h"

namespace kvstore {
namespace {

// Calls `fn(leaf, path)` on every leaf, in order, until it returns false;
// path is "3" for layer 3, "3.1" for its child 1. False when `fn` stopped it.
bool ForEachLeaf(Cache& cache, const std::string& path, const std::function<bool(Cache&, const std::string&)>& fn) {
  if (auto* list = dynamic_cast<CacheList*>(&cache)) {
    for (size_t c = 0; c < list->num_children(); ++c) {
      if (!ForEachLeaf(*list->child(c), path + "." + std::to_string(c), fn)) return false;
    }
    return true;
  }
  return fn(cache, path);
}

bool ForEachLeaf(std::span<const std::shared_ptr<Cache>> cache,
                 const std::function<bool(Cache&, const std::string&)>& fn) {
  for (size_t i = 0; i < cache.size(); ++i) {
    if (!ForEachLeaf(*cache[i], std::to_string(i), fn)) return false;
  }
  return true;
}

}  // namespace

Status CheckLeafTokens(std::span<const std::shared_ptr<Cache>> cache, int64_t tokens) {
  Status status;
  ForEachLeaf(cache, [&](Cache& leaf, const std::string& path) {
    const std::optional<int64_t> offset = leaf.offset();
    if (!offset || *offset == tokens) return true;
    status = Status::InvalidArgument("layer " + path + " (" + std::string(leaf.class_name()) + "): offset " +
                                     std::to_string(*offset) + " != " + std::to_string(tokens) + " tokens");
    return false;
  });
  return status;
}

bool TrimEveryLeaf(std::span<const std::shared_ptr<Cache>> cache, int64_t cut, int64_t tokens) {
  const bool trimmed = ForEachLeaf(cache, [&](Cache& leaf, const std::string&) {
    if (cut == 0) return true;
    if (!leaf.IsTrimmable()) return false;
    Result<int64_t> t = leaf.Trim(cut);
    return t.ok() && *t == cut;
  });
  return trimmed && CheckLeafTokens(cache, tokens).ok();
}

}  // namespace kvstore
