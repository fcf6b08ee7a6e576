// PrefixIndex: the structure the memory tier (server policy) and the disk
// tier (StoreIndex) share, written once: entries by id, by key hash and by
// recency, with a byte count. Two lookups for a query:
//   * the entry with the longest key that is a prefix of the query, probing
//     the hash of each key length the index holds for the query's model,
//     longest first: O(distinct lengths) probes over prefix hashes computed
//     once per prompt (prefix_hash.h). Lengths are kept per model, so what
//     one model key (a tenant: kvstore/tenant_salt.h) holds never changes
//     the work, and so the time, of another's lookups;
//   * among entries registered as trimmable, the one sharing the longest
//     common prefix with the query, even when it is longer (GranuleIndex).
// Keys are always compared exactly: a hash match alone serves nothing. A
// lookup that finds an entry makes it the most recently used. Not
// thread-safe: the owning tier's lock guards it.
//
// Value must have `PrefixKey key` and `int64_t bytes` members.
#ifndef KVSTORE_LIBKVSTORE_TIERS_PREFIX_INDEX_H_
#define KVSTORE_LIBKVSTORE_TIERS_PREFIX_INDEX_H_

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "libkvstore/tiers/granule_index.h"
#include "libkvstore/tiers/prefix_hash.h"

namespace kvstore {

template <typename Id, typename Value>
class PrefixIndex {
 public:
  struct Node {
    Id id;
    Value value;
    uint64_t key_hash = 0;
    typename std::list<Node*>::iterator lru;
    std::vector<uint64_t> granules;  // registered in granules_ (trimmable entries)
  };

  PrefixIndex() = default;
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // Adds `value` under `id` as the most recently used, replacing (and
  // returning) the value of the same id. `key_hash` is
  // KeyHash(value.key.model, value.key.tokens); a trimmable entry passes
  // `prefix_hashes` = PrefixHashes(model, tokens), any other an empty span.
  std::optional<Value> Insert(const Id& id, Value value, uint64_t key_hash,
                              std::span<const uint64_t> prefix_hashes, Node** inserted = nullptr) {
    std::optional<Value> replaced = Erase(id);
    auto [it, added] = by_id_.try_emplace(id, Node{id, std::move(value), key_hash, {}, {}});
    Node& node = it->second;
    bytes_ += node.value.bytes;
    by_hash_.emplace(key_hash, &node);
    ++lengths_[node.value.key.model][node.value.key.tokens.size()];
    lru_.push_front(&node);
    node.lru = lru_.begin();
    if (!prefix_hashes.empty()) node.granules = granules_.Add(&node, prefix_hashes);
    if (inserted != nullptr) *inserted = &node;
    return replaced;
  }

  // Removes the entry of `id`, returning its value; nullopt when absent.
  std::optional<Value> Erase(const Id& id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    Node& node = it->second;
    auto [first, last] = by_hash_.equal_range(node.key_hash);
    for (auto h = first; h != last; ++h) {
      if (h->second == &node) {
        by_hash_.erase(h);
        break;
      }
    }
    granules_.Remove(&node, node.granules);
    auto model = lengths_.find(node.value.key.model);
    auto length = model->second.find(node.value.key.tokens.size());
    if (--length->second == 0) model->second.erase(length);
    if (model->second.empty()) lengths_.erase(model);
    lru_.erase(node.lru);
    bytes_ -= node.value.bytes;
    std::optional<Value> out(std::move(node.value));
    by_id_.erase(it);
    return out;
  }

  Node* Find(const Id& id) {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &it->second;
  }
  const Node* Find(const Id& id) const { return const_cast<PrefixIndex*>(this)->Find(id); }

  // The entry with the longest key (model, tokens[:n]), 1 <= n <= max_len;
  // nullptr when there is none. REQUIRES: prefix_hashes is
  // PrefixHashes(model, tokens) and max_len <= tokens.size().
  Node* FindLongestPrefix(std::string_view model, std::span<const int32_t> tokens,
                          std::span<const uint64_t> prefix_hashes, size_t max_len) {
    const auto held = lengths_.find(model);
    if (held == lengths_.end()) return nullptr;
    const std::map<size_t, int64_t>& lengths = held->second;
    for (auto length = lengths.upper_bound(max_len); length != lengths.begin();) {
      const size_t n = (--length)->first;
      if (n == 0) break;  // an empty key is never served
      ++probes_;
      auto [first, last] = by_hash_.equal_range(prefix_hashes[n]);
      for (auto it = first; it != last; ++it) {
        Node& node = *it->second;
        const PrefixKey& key = node.value.key;
        if (key.tokens.size() != n || key.model != model ||
            !std::equal(key.tokens.begin(), key.tokens.end(), tokens.begin())) {
          continue;
        }
        Touch(node);
        return &node;
      }
    }
    return nullptr;
  }

  // The trimmable entry sharing the most tokens (more than `at_least`) with
  // `tokens`, as `common`; nullptr when none does. REQUIRES: prefix_hashes
  // as for FindLongestPrefix.
  Node* FindLonger(std::string_view model, std::span<const int32_t> tokens,
                   std::span<const uint64_t> prefix_hashes, int64_t at_least, int64_t& common) {
    const auto sequence_of = [](Node* node) {
      return typename GranuleIndex<Node*>::Sequence{node->value.key.model, node->value.key.tokens};
    };
    const auto match = granules_.FindLonger(model, tokens, prefix_hashes, at_least, sequence_of);
    if (!match) return nullptr;
    common = match->common;
    Touch(*match->id);
    return match->id;
  }

  // FindLonger no longer offers `node`.
  void MarkUntrimmable(Node& node) {
    granules_.Remove(&node, node.granules);
    node.granules.clear();
  }

  // The least recently used entry; nullptr when empty.
  const Node* LeastRecent() const { return lru_.empty() ? nullptr : lru_.back(); }
  // Calls `fn(value)` on every entry, least recently used first.
  template <typename Fn>
  void ForEach(const Fn& fn) const {
    for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) fn(std::as_const((*it)->value));
  }

  // Makes `node` the most recently used.
  void Touch(Node& node) { lru_.splice(lru_.begin(), lru_, node.lru); }

  size_t size() const { return by_id_.size(); }
  int64_t bytes() const { return bytes_; }
  // Hash probes FindLongestPrefix has made so far (what its time follows).
  int64_t probes() const { return probes_; }

 private:
  std::unordered_map<Id, Node> by_id_;
  std::unordered_multimap<uint64_t, Node*> by_hash_;
  std::list<Node*> lru_;               // front = most recently used
  // model -> key length (tokens) -> entries of that length
  std::map<std::string, std::map<size_t, int64_t>, std::less<>> lengths_;
  GranuleIndex<Node*> granules_;
  int64_t bytes_ = 0;
  int64_t probes_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_PREFIX_INDEX_H_
