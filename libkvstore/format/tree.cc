#include "libkvstore/format/tree.h"

namespace kvstore {

Status FlattenState(const CacheState& state, const std::string& prefix, std::vector<NamedArray>& out) {
  if (state.is_none()) {
    return Status::InvalidArgument("state entry " + prefix + " is None and cannot be saved");
  }
  if (state.is_array()) {
    out.push_back({prefix, state.array()});
    return Status::OK();
  }
  if (state.is_scalar()) {
    return Status::InvalidArgument("state entry " + prefix + " is the scalar " + state.DebugString() +
                                   ", which only mlx-lm 0.32's layout stores");
  }
  for (size_t i = 0; i < state.size(); ++i) {
    const std::string name = prefix.empty() ? std::to_string(i) : prefix + "." + std::to_string(i);
    KV_RETURN_IF_ERROR(FlattenState(state[i], name, out));
  }
  return Status::OK();
}

void FlattenMeta(const MetaState& meta, const std::string& prefix, Metadata& out) {
  if (meta.is_string()) {
    out.emplace_back(prefix, meta.str());
    return;
  }
  for (size_t i = 0; i < meta.size(); ++i) {
    FlattenMeta(meta[i], prefix.empty() ? std::to_string(i) : prefix + "." + std::to_string(i), out);
  }
}

const NameTree* NameTree::Child(std::string_view l) const {
  auto it = index.find(std::string(l));
  return it == index.end() ? nullptr : &children[it->second];
}

Status NameTree::Insert(std::string_view name, int64_t value_index) {
  const std::string_view full = name;
  NameTree* node = this;
  size_t parts = 0;
  while (true) {
    if (++parts > kMaxNameParts) {
      return Status::Corruption("name \"" + std::string(full.substr(0, 64)) + "...\" has more than " +
                                std::to_string(kMaxNameParts) + " parts");
    }
    const size_t dot = name.find('.');
    const std::string part(name.substr(0, dot));
    auto [it, added] = node->index.emplace(part, node->children.size());
    if (added) node->children.push_back(NameTree{part, -1, {}, {}});
    node = &node->children[it->second];
    if (dot == std::string_view::npos) break;
    if (node->leaf >= 0) {
      return Status::Corruption("name \"" + std::string(full) + "\" extends another name's value");
    }
    name.remove_prefix(dot + 1);
  }
  if (node->leaf >= 0 || !node->children.empty()) {
    return Status::Corruption("name \"" + std::string(full) + "\" is both a value and a prefix, or repeats");
  }
  node->leaf = value_index;
  return Status::OK();
}

namespace {
constexpr size_t kMaxListLength = 1 << 20;

std::optional<size_t> PlainIndex(std::string_view s) {
  if (s.empty() || s.size() > 7 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<size_t>(c - '0');
  }
  return v;
}
}  // namespace

std::optional<std::vector<const NameTree*>> NameTree::AsList() const {
  size_t n = 0;
  for (const NameTree& c : children) {
    std::optional<size_t> i = PlainIndex(c.label);
    if (!i || *i >= kMaxListLength) return std::nullopt;
    n = std::max(n, *i + 1);
  }
  if (n > 2 * children.size() + 64) return std::nullopt;
  std::vector<const NameTree*> out(n, nullptr);
  for (const NameTree& c : children) out[*PlainIndex(c.label)] = &c;
  return out;
}

Result<MetaState> MetaFromTree(const NameTree& node, const std::vector<std::string>& values) {
  if (node.leaf >= 0) return MetaState(values[static_cast<size_t>(node.leaf)]);
  auto list = node.AsList();
  if (!list) return Status::Corruption("metadata keys under \"" + node.label + "\" are not list indices");
  MetaState::List items;
  for (const NameTree* child : *list) {
    if (child == nullptr) {
      items.emplace_back(MetaState::List{});
      continue;
    }
    KV_ASSIGN_OR_RETURN(MetaState m, MetaFromTree(*child, values));
    items.push_back(std::move(m));
  }
  return MetaState(std::move(items));
}

}  // namespace kvstore
