#include "kvstore/prompt_trie.h"

#include <algorithm>
#include <string>
#include <unordered_map>

namespace kvstore::internal {

namespace {

// Past this many children a node keeps a hash index; below it a linear scan
// is cheaper (most nodes of a prompt trie have a single child).
constexpr size_t kIndexThreshold = 8;

}  // namespace

// Children are kept in a vector to preserve insertion order; the optional
// index maps token -> position for nodes with many children.
struct PromptTrieCore::Node {
  Slot slot = kNoSlot;
  std::vector<std::pair<int32_t, std::unique_ptr<Node>>> children;
  std::unique_ptr<std::unordered_map<int32_t, size_t>> index;

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Destroys the subtree with an explicit stack: a prompt of 100k tokens is
  // a chain 100k nodes deep, too deep for recursive destructors.
  ~Node() {
    std::vector<std::unique_ptr<Node>> pending;
    for (auto& [token, child] : children) pending.push_back(std::move(child));
    children.clear();
    while (!pending.empty()) {
      std::unique_ptr<Node> node = std::move(pending.back());
      pending.pop_back();
      for (auto& [token, child] : node->children) pending.push_back(std::move(child));
      node->children.clear();
    }
  }

  bool empty() const { return slot == kNoSlot && children.empty(); }

  std::optional<size_t> Position(int32_t token) const {
    if (index != nullptr) {
      auto it = index->find(token);
      if (it == index->end()) return std::nullopt;
      return it->second;
    }
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].first == token) return i;
    }
    return std::nullopt;
  }

  Node* Child(int32_t token) const {
    std::optional<size_t> pos = Position(token);
    return pos ? children[*pos].second.get() : nullptr;
  }

  Node* AddChild(int32_t token) {
    children.emplace_back(token, std::make_unique<Node>());
    if (index != nullptr) {
      index->emplace(token, children.size() - 1);
    } else if (children.size() > kIndexThreshold) {
      RebuildIndex();
    }
    return children.back().second.get();
  }

  // REQUIRES: token is a child.
  void RemoveChild(int32_t token) {
    const size_t pos = *Position(token);
    children.erase(children.begin() + static_cast<ptrdiff_t>(pos));
    if (index != nullptr) RebuildIndex();
  }

  void RebuildIndex() {
    if (children.size() <= kIndexThreshold) {
      index.reset();
      return;
    }
    index = std::make_unique<std::unordered_map<int32_t, size_t>>();
    index->reserve(children.size());
    for (size_t i = 0; i < children.size(); ++i) index->emplace(children[i].first, i);
  }
};

PromptTrieCore::PromptTrieCore() = default;
PromptTrieCore::~PromptTrieCore() = default;
PromptTrieCore::PromptTrieCore(PromptTrieCore&&) noexcept = default;
PromptTrieCore& PromptTrieCore::operator=(PromptTrieCore&&) noexcept = default;

PromptTrieCore::Slot PromptTrieCore::slot(const Node& node) { return node.slot; }
size_t PromptTrieCore::num_children(const Node& node) { return node.children.size(); }
int32_t PromptTrieCore::child_token(const Node& node, size_t i) { return node.children[i].first; }
const PromptTrieCore::Node& PromptTrieCore::child(const Node& node, size_t i) {
  return *node.children[i].second;
}

const PromptTrieCore::Node* PromptTrieCore::FindRoot(std::string_view model) const {
  auto it = root_index_.find(model);
  return it == root_index_.end() ? nullptr : roots_[it->second].second.get();
}

PromptTrieCore::Slot& PromptTrieCore::FindOrCreate(std::string_view model,
                                                   std::span<const int32_t> tokens) {
  Node* node = const_cast<Node*>(FindRoot(model));
  if (node == nullptr) {
    root_index_.emplace(std::string(model), roots_.size());
    roots_.emplace_back(std::string(model), std::make_unique<Node>());
    node = roots_.back().second.get();
  }
  for (int32_t token : tokens) {
    Node* next = node->Child(token);
    node = next != nullptr ? next : node->AddChild(token);
  }
  return node->slot;
}

Result<std::vector<PromptTrieCore::Node*>> PromptTrieCore::Path(
    std::string_view model, std::span<const int32_t> tokens) const {
  const Node* root = FindRoot(model);
  if (root == nullptr) {
    return Status::NotFound("prompt trie: no model '" + std::string(model) + "'");
  }
  // Nodes are owned by this trie; callers that mutate hold a non-const `this`.
  std::vector<Node*> path{const_cast<Node*>(root)};
  path.reserve(tokens.size() + 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    Node* next = path.back()->Child(tokens[i]);
    if (next == nullptr) {
      return Status::NotFound("prompt trie model '" + std::string(model) + "': no node for token " +
                              std::to_string(tokens[i]) + " at position " + std::to_string(i));
    }
    path.push_back(next);
  }
  return path;
}

namespace {

Status NoValue(std::string_view model, size_t length) {
  return Status::NotFound("prompt trie model '" + std::string(model) + "': the node of the " +
                          std::to_string(length) + "-token sequence holds no value");
}

}  // namespace

Result<PromptTrieCore::Slot> PromptTrieCore::Find(std::string_view model,
                                                  std::span<const int32_t> tokens) const {
  KV_ASSIGN_OR_RETURN(std::vector<Node*> path, Path(model, tokens));
  if (path.back()->slot == kNoSlot) return NoValue(model, tokens.size());
  return path.back()->slot;
}

Result<PromptTrieCore::Slot> PromptTrieCore::Remove(std::string_view model,
                                                    std::span<const int32_t> tokens) {
  KV_ASSIGN_OR_RETURN(std::vector<Node*> path, Path(model, tokens));
  const Slot slot = path.back()->slot;
  if (slot == kNoSlot) return NoValue(model, tokens.size());
  path.back()->slot = kNoSlot;
  for (size_t i = tokens.size(); i > 0; --i) {
    if (!path[i]->empty()) break;
    path[i - 1]->RemoveChild(tokens[i - 1]);
  }
  return slot;
}

Result<std::vector<std::pair<int64_t, PromptTrieCore::Slot>>> PromptTrieCore::RemovePrefixes(
    std::string_view model, std::span<const int32_t> tokens) {
  KV_ASSIGN_OR_RETURN(std::vector<Node*> path, Path(model, tokens));
  std::vector<std::pair<int64_t, Slot>> removed;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (path[i]->slot == kNoSlot) continue;
    removed.emplace_back(static_cast<int64_t>(i), path[i]->slot);
    path[i]->slot = kNoSlot;
  }
  return removed;
}

PromptTrieResult PromptTrieCore::Search(std::string_view model,
                                        std::span<const int32_t> tokens) const {
  PromptTrieResult result;
  result.model = std::string(model);
  const Node* node = FindRoot(model);
  if (node == nullptr) return result;
  if (tokens.empty() && node->slot != kNoSlot) {
    result.exact.emplace();
    return result;
  }

  // Walk as far as the trie goes; `last` is the position of the deepest
  // walked node with a value (the root is not considered).
  int64_t last = -1;
  size_t index = 0;
  while (index < tokens.size()) {
    const Node* next = node->Child(tokens[index]);
    if (next == nullptr) break;
    node = next;
    if (node->slot != kNoSlot) last = static_cast<int64_t>(index);
    ++index;
  }

  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > 0 && last == n - 1) {
    result.exact.emplace(tokens.begin(), tokens.end());
    return result;
  }
  // mlx-lm tests `last > 0`, so a 1-token prefix is never `shorter`.
  if (last > 0) result.shorter.emplace(tokens.begin(), tokens.begin() + last + 1);

  if (index > 0) {
    std::optional<std::vector<int32_t>> best = ShortestExtension(*node);
    if (best.has_value()) {
      std::vector<int32_t> longer(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(index));
      longer.insert(longer.end(), best->begin(), best->end());
      result.longer = std::move(longer);
    }
  }
  result.common_prefix = static_cast<int64_t>(index);
  return result;
}

// mlx-lm's depth-first search for the shortest path from `start` to a node
// with a value, reproduced step for step so that ties resolve the same way.
// Paths are kept as parent links into `steps` instead of copied lists.
std::optional<std::vector<int32_t>> PromptTrieCore::ShortestExtension(const Node& start) {
  struct Step {
    int64_t parent;  // index into steps, -1 for `start`
    int32_t token;
  };
  struct Pending {
    const Node* node;
    int64_t step;
    size_t length;
  };
  std::vector<Step> steps;
  std::vector<Pending> stack{{&start, -1, 0}};
  std::optional<std::pair<int64_t, size_t>> best;  // (step, length)
  while (!stack.empty()) {
    const Pending current = stack.back();
    stack.pop_back();
    const bool shorter_than_best = !best.has_value() || current.length < best->second;
    if (current.node->slot != kNoSlot) {
      if (shorter_than_best) best.emplace(current.step, current.length);
    } else if (shorter_than_best) {
      for (const auto& [token, child] : current.node->children) {
        steps.push_back({current.step, token});
        stack.push_back({child.get(), static_cast<int64_t>(steps.size()) - 1, current.length + 1});
      }
    }
  }
  if (!best.has_value()) return std::nullopt;
  std::vector<int32_t> extension(best->second);
  int64_t step = best->first;
  for (size_t i = extension.size(); i > 0; --i) {
    extension[i - 1] = steps[static_cast<size_t>(step)].token;
    step = steps[static_cast<size_t>(step)].parent;
  }
  return extension;
}

void PromptTrieCore::ForEach(
    const std::function<void(std::string_view, std::span<const int32_t>, Slot)>& fn) const {
  struct Frame {
    const Node* node;
    size_t next_child;
  };
  std::vector<int32_t> tokens;
  std::vector<Frame> stack;
  for (const auto& [model, root] : roots_) {
    if (root->slot != kNoSlot) fn(model, tokens, root->slot);
    stack.push_back({root.get(), 0});
    // The stack holds one frame per node of the current path: tokens.size() + 1.
    while (!stack.empty()) {
      Frame& top = stack.back();
      if (top.next_child == top.node->children.size()) {
        stack.pop_back();
        if (!stack.empty()) tokens.pop_back();
        continue;
      }
      const auto& [token, child] = top.node->children[top.next_child++];
      tokens.push_back(token);
      if (child->slot != kNoSlot) fn(model, tokens, child->slot);
      stack.push_back({child.get(), 0});
    }
  }
}

}  // namespace kvstore::internal
