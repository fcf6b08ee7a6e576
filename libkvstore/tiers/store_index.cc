#include "libkvstore/tiers/store_index.h"

#include <algorithm>

#include "libkvstore/tiers/prefix_hash.h"

namespace kvstore {

const StoreIndex::Entry& StoreIndex::Insert(Entry entry, uint64_t key_hash) {
  Erase(entry.file);
  entry.generation = next_generation_++;
  const std::string file = entry.file;
  bytes_ += entry.bytes;
  Node& node = by_file_[file];
  node.entry = std::move(entry);
  node.key_hash = key_hash;
  by_hash_.emplace(key_hash, &node);
  ++lengths_[node.entry.key.tokens.size()];
  lru_.push_front(&node);
  node.lru = lru_.begin();
  node.granules.clear();
  if (node.entry.may_trim) {
    node.granules = granules_.Add(&node, PrefixHashes(node.entry.key.model, node.entry.key.tokens));
  }
  return node.entry;
}

void StoreIndex::Unlink(Node& node) {
  auto [first, last] = by_hash_.equal_range(node.key_hash);
  for (auto it = first; it != last; ++it) {
    if (it->second == &node) {
      by_hash_.erase(it);
      break;
    }
  }
  granules_.Remove(&node, node.granules);
  node.granules.clear();
  auto length = lengths_.find(node.entry.key.tokens.size());
  if (--length->second == 0) lengths_.erase(length);
  lru_.erase(node.lru);
  bytes_ -= node.entry.bytes;
}

bool StoreIndex::Erase(const std::string& file, std::optional<uint64_t> generation) {
  auto it = by_file_.find(file);
  if (it == by_file_.end() || (generation && it->second.entry.generation != *generation)) return false;
  Unlink(it->second);
  by_file_.erase(it);
  return true;
}

const StoreIndex::Entry* StoreIndex::FindLongestPrefix(std::string_view model, std::span<const int32_t> tokens,
                                                       std::span<const uint64_t> prefix_hashes, size_t max_len) {
  for (auto length = lengths_.upper_bound(max_len); length != lengths_.begin();) {
    const size_t n = (--length)->first;
    if (n == 0) break;  // an empty key is never served
    auto [first, last] = by_hash_.equal_range(prefix_hashes[n]);
    for (auto it = first; it != last; ++it) {
      Node& node = *it->second;
      const StoreKey& key = node.entry.key;
      if (key.tokens.size() != n || key.model != model ||
          !std::equal(key.tokens.begin(), key.tokens.end(), tokens.begin())) {
        continue;
      }
      lru_.splice(lru_.begin(), lru_, node.lru);
      return &node.entry;
    }
  }
  return nullptr;
}

const StoreIndex::Entry* StoreIndex::FindLonger(std::string_view model, std::span<const int32_t> tokens,
                                                std::span<const uint64_t> prefix_hashes, int64_t at_least,
                                                int64_t& common) {
  const auto sequence_of = [](Node* node) {
    return GranuleIndex<Node*>::Sequence{node->entry.key.model, node->entry.key.tokens};
  };
  const auto match = granules_.FindLonger(model, tokens, prefix_hashes, at_least, sequence_of);
  if (!match) return nullptr;
  common = match->common;
  lru_.splice(lru_.begin(), lru_, match->id->lru);
  return &match->id->entry;
}

void StoreIndex::MarkUntrimmable(const std::string& file, uint64_t generation) {
  auto it = by_file_.find(file);
  if (it == by_file_.end() || it->second.entry.generation != generation) return;
  Node& node = it->second;
  node.entry.may_trim = false;
  granules_.Remove(&node, node.granules);
  node.granules.clear();
}

const StoreIndex::Entry* StoreIndex::LeastRecent() const { return lru_.empty() ? nullptr : &lru_.back()->entry; }

void StoreIndex::ForEach(const std::function<void(const Entry&)>& fn) const {
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) fn((*it)->entry);
}

}  // namespace kvstore
