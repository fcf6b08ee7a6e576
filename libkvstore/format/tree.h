// mlx's tree_flatten / tree_unflatten (`python/mlx/utils.py`) for cache state
// and meta-state trees (docs/format.md §5.1): lists become children named by
// their decimal index, names are dot-joined paths, empty lists contribute
// nothing.
#ifndef KVSTORE_LIBKVSTORE_FORMAT_TREE_H_
#define KVSTORE_LIBKVSTORE_FORMAT_TREE_H_

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvstore/cache_state.h"
#include "kvstore/safetensors.h"

namespace kvstore {

// Appends (prefix.path, array) for every leaf; InvalidArgument for a None
// leaf (mlx-lm cannot save one either).
Status FlattenState(const CacheState& state, const std::string& prefix,
                    std::vector<NamedArray>& out);
// Appends (prefix.path, string) for every leaf.
void FlattenMeta(const MetaState& meta, const std::string& prefix, Metadata& out);

// Names deeper than this are refused (the trees are walked recursively).
inline constexpr size_t kMaxNameParts = 32;

// A tree of dot-separated names, children in first-appearance order.
struct NameTree {
  std::string label;
  int64_t leaf = -1;  // index of the value when this node names one
  std::vector<NameTree> children;
  std::unordered_map<std::string, size_t> index;  // label -> position in children

  // Inserts `name` (split at '.') for value `index`. Corruption when a name
  // is both a value and a prefix of another, repeats, or has more than
  // kMaxNameParts parts.
  Status Insert(std::string_view name, int64_t value_index);
  const NameTree* Child(std::string_view label) const;
  // Children as a list when every label is a plain decimal integer (no sign,
  // no leading zeros unless "0"), labels are distinct and the gaps are few
  // (length at most 2 x children + 64, so that a few hostile names cannot
  // make a huge list): element i is the child labelled i or nullptr for a
  // gap. nullopt when not a list.
  std::optional<std::vector<const NameTree*>> AsList() const;
};

// Rebuilds a MetaState; gaps become empty lists (falsy, like Python's {}).
Result<MetaState> MetaFromTree(const NameTree& node, const std::vector<std::string>& values);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_TREE_H_
