// PromptTrie<Value>: mlx-lm's per-model trie over token ids (cache.py
// PromptTrie), the index behind LRUPromptCache.
//
// Each model key (an opaque string; the mlx-lm server uses the tuple
// model/adapter/draft paths) has its own trie. A node is reached by a token
// sequence and may carry a Value. Children keep insertion order, which
// decides ties in Search and the order of traversals; a pruned child that is
// added again goes last. Model roots are never removed.
//
// Failing calls (Get/Pop/PopPrefixes on a missing model, node or value:
// mlx-lm's KeyError) return NotFound and leave the trie unchanged.
// mlx-lm's pop_prefixes removes values while walking and can raise after
// removing some; ours checks the whole path first.
//
// Deep tries are fine: no operation recurses over the token depth.
//
// Threads: not thread-safe. One thread at a time may call a mutating member;
// const members may run concurrently with each other only.
#ifndef KVSTORE_PROMPT_TRIE_H_
#define KVSTORE_PROMPT_TRIE_H_

#include <cassert>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvstore/status.h"

namespace kvstore {

// What PromptTrie::Search found for a query (PromptTrieResult in mlx-lm).
struct PromptTrieResult {
  std::string model;
  // The query itself, when its node carries a value (then all else is unset
  // and common_prefix is 0).
  std::optional<std::vector<int32_t>> exact;
  // The longest strict prefix of the query whose node carries a value, when
  // it has at least 2 tokens: a 1-token prefix and the root are never
  // reported here.
  std::optional<std::vector<int32_t>> shorter;
  // The query's first common_prefix tokens plus the shortest extension that
  // reaches a value (possibly no extension: then longer may equal shorter).
  std::optional<std::vector<int32_t>> longer;
  // How many leading query tokens exist as a path in the trie (0 on an exact
  // hit, an unknown model or when the first token is missing).
  int64_t common_prefix = 0;

  friend bool operator==(const PromptTrieResult&, const PromptTrieResult&) = default;
};

namespace internal {

// The value-agnostic structure of PromptTrie: nodes carry a slot number
// into the owning PromptTrie's value table. Use PromptTrie instead.
class PromptTrieCore {
 public:
  using Slot = uint32_t;
  static constexpr Slot kNoSlot = UINT32_MAX;
  struct Node;  // defined in prompt_trie.cc

  PromptTrieCore();
  ~PromptTrieCore();
  PromptTrieCore(const PromptTrieCore&) = delete;
  PromptTrieCore& operator=(const PromptTrieCore&) = delete;
  PromptTrieCore(PromptTrieCore&&) noexcept;
  PromptTrieCore& operator=(PromptTrieCore&&) noexcept;

  // The slot of the node at (model, tokens), creating the model and the path
  // as needed. The reference is valid until the next mutating call.
  Slot& FindOrCreate(std::string_view model, std::span<const int32_t> tokens);
  // The slot at the node; NotFound when the model, a node or the value is missing.
  Result<Slot> Find(std::string_view model, std::span<const int32_t> tokens) const;
  // Clears and returns the node's slot, then deletes the nodes that became
  // empty, walking towards the root. Errors as Find, with no change.
  Result<Slot> Remove(std::string_view model, std::span<const int32_t> tokens);
  // Clears the slots at every strict prefix (lengths 0 .. size-1) and returns
  // (length, slot) pairs, shortest first; no pruning. NotFound, with no
  // change, when the model or a node of the full path is missing.
  Result<std::vector<std::pair<int64_t, Slot>>> RemovePrefixes(std::string_view model,
                                                               std::span<const int32_t> tokens);
  PromptTrieResult Search(std::string_view model, std::span<const int32_t> tokens) const;

  // Every (model, tokens, slot) with a value: models in insertion order, then
  // a pre-order walk (a node before its children, children in insertion order).
  void ForEach(
      const std::function<void(std::string_view, std::span<const int32_t>, Slot)>& fn) const;

  // Read-only structure, for snapshots.
  size_t num_models() const { return roots_.size(); }
  std::string_view model_name(size_t i) const { return roots_[i].first; }
  const Node& root(size_t i) const { return *roots_[i].second; }
  static Slot slot(const Node& node);
  static size_t num_children(const Node& node);
  static int32_t child_token(const Node& node, size_t i);
  static const Node& child(const Node& node, size_t i);

 private:
  const Node* FindRoot(std::string_view model) const;
  // The nodes of the path, root first (size + 1 of them), or NotFound.
  Result<std::vector<Node*>> Path(std::string_view model, std::span<const int32_t> tokens) const;
  // The shortest token path from `start` to a node with a value (Search step 6).
  static std::optional<std::vector<int32_t>> ShortestExtension(const Node& start);

  std::vector<std::pair<std::string, std::unique_ptr<Node>>> roots_;  // insertion order
  std::map<std::string, size_t, std::less<>> root_index_;             // model -> roots_ index
};

}  // namespace internal

// A trie mapping (model, token sequence) to Value, with mlx-lm's lookup rules.
// Value must be movable; Get and Pop copy or move it out.
template <typename Value>
class PromptTrie {
 public:
  // A read-only view of one node, valid until the next mutating call.
  class NodeView {
   public:
    // The node's value, or nullptr when it carries none.
    const Value* value() const { return trie_->ValueAt(Core::slot(*node_)); }
    size_t num_children() const { return Core::num_children(*node_); }
    // REQUIRES: i < num_children(). Children are in insertion order.
    int32_t child_token(size_t i) const { return Core::child_token(*node_, i); }
    NodeView child(size_t i) const { return NodeView(trie_, &Core::child(*node_, i)); }

   private:
    friend class PromptTrie;
    NodeView(const PromptTrie* trie, const internal::PromptTrieCore::Node* node)
        : trie_(trie), node_(node) {}
    const PromptTrie* trie_;
    const internal::PromptTrieCore::Node* node_;
  };

  PromptTrie() = default;

  // Stores `value` at (model, tokens), creating the path; returns the value
  // that was there before, if any (add).
  std::optional<Value> Add(std::string_view model, std::span<const int32_t> tokens, Value value) {
    Slot& slot = core_.FindOrCreate(model, tokens);
    if (slot != Core::kNoSlot) {
      std::optional<Value> previous = std::move(values_[slot]);
      values_[slot] = std::move(value);
      return previous;
    }
    slot = NewSlot(std::move(value));
    return std::nullopt;
  }

  // The value at exactly (model, tokens) (get). NotFound when the model, a
  // node on the path or the value is missing.
  Result<Value> Get(std::string_view model, std::span<const int32_t> tokens) const {
    KV_ASSIGN_OR_RETURN(Slot slot, core_.Find(model, tokens));
    return *values_[slot];
  }
  // Like Get without copying: nullptr when absent. Valid until the next
  // mutating call.
  const Value* Find(std::string_view model, std::span<const int32_t> tokens) const {
    Result<Slot> slot = core_.Find(model, tokens);
    return slot.ok() ? ValueAt(*slot) : nullptr;
  }
  Value* Find(std::string_view model, std::span<const int32_t> tokens) {
    return const_cast<Value*>(std::as_const(*this).Find(model, tokens));
  }

  // Removes and returns the value at (model, tokens), then deletes the nodes
  // left empty on the way back to the root (pop). Errors as Get, no change.
  Result<Value> Pop(std::string_view model, std::span<const int32_t> tokens) {
    KV_ASSIGN_OR_RETURN(Slot slot, core_.Remove(model, tokens));
    return TakeSlot(slot);
  }

  // Removes the values at every strict prefix of `tokens` (the empty prefix
  // included) and returns them as (prefix length, value), shortest first
  // (pop_prefixes). Nodes are not pruned. NotFound, with no change, when the
  // model or any node of the full path is missing.
  Result<std::vector<std::pair<int64_t, Value>>> PopPrefixes(std::string_view model,
                                                             std::span<const int32_t> tokens) {
    KV_ASSIGN_OR_RETURN(auto slots, core_.RemovePrefixes(model, tokens));
    std::vector<std::pair<int64_t, Value>> out;
    out.reserve(slots.size());
    for (const auto& [length, slot] : slots) out.emplace_back(length, TakeSlot(slot));
    return out;
  }

  // mlx-lm's search, step by step:
  //  1. unknown model: nothing found, common_prefix 0;
  //  2. empty query and the root carries a value: exact = [];
  //  3. walk the query from the root while the next token is a child;
  //     index = tokens walked, last = position of the deepest walked node
  //     with a value (-1 if none; the root does not count);
  //  4. last == size - 1 >= 0: exact = tokens (and nothing else);
  //  5. last > 0: shorter = tokens[0, last];
  //  6. index > 0: depth-first search below the node reached, children
  //     pushed on a LIFO stack in insertion order (so the last inserted child
  //     is explored first). A node with a value is a candidate and is not
  //     expanded; it replaces the best only if strictly shorter. A node
  //     without one is expanded only while no candidate is known or its path
  //     is shorter than the best. longer = tokens[0, index) + best extension
  //     (the reached node's own value gives the empty extension);
  //  7. common_prefix = index.
  PromptTrieResult Search(std::string_view model, std::span<const int32_t> tokens) const {
    return core_.Search(model, tokens);
  }

  // Calls fn(model, tokens, value) for every value: models in insertion
  // order, then a pre-order walk with children in insertion order. fn must
  // not modify the trie.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    core_.ForEach([&](std::string_view model, std::span<const int32_t> tokens, Slot slot) {
      fn(model, tokens, *values_[slot]);
    });
  }

  // Number of values stored.
  size_t size() const { return values_.size() - free_slots_.size(); }
  bool empty() const { return size() == 0; }

  // Models in insertion order, each with its root node.
  size_t num_models() const { return core_.num_models(); }
  std::string_view model_name(size_t i) const { return core_.model_name(i); }
  NodeView root(size_t i) const { return NodeView(this, &core_.root(i)); }

 private:
  using Core = internal::PromptTrieCore;
  using Slot = Core::Slot;

  const Value* ValueAt(Slot slot) const {
    return slot == Core::kNoSlot ? nullptr : &*values_[slot];
  }
  Slot NewSlot(Value value) {
    if (!free_slots_.empty()) {
      Slot slot = free_slots_.back();
      free_slots_.pop_back();
      values_[slot] = std::move(value);
      return slot;
    }
    assert(values_.size() < Core::kNoSlot);
    values_.emplace_back(std::move(value));
    return static_cast<Slot>(values_.size() - 1);
  }
  Value TakeSlot(Slot slot) {
    Value value = std::move(*values_[slot]);
    values_[slot].reset();
    free_slots_.push_back(slot);
    return value;
  }

  Core core_;
  std::vector<std::optional<Value>> values_;  // indexed by slot; empty where freed
  std::vector<Slot> free_slots_;
};

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_TRIE_H_
