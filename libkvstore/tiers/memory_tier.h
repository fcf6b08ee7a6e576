// The memory tier of ServerPromptCache: caches by (model key, tokens) with
// LRU eviction over an entry and a byte budget, and two lookups for a
// query:
//   * the longest stored key that is a prefix of the query (O(query):
//     one hash probe per prefix length);
//   * among entries whose every layer can be trimmed, the one sharing the
//     longest common prefix with the query, even when it is longer (the
//     "edit the last message" case): a GranuleIndex, O(query / 32) probes.
// Keys are always compared exactly: a hash match alone serves nothing.
// Not thread-safe: ServerPromptCache's lock guards it. Caches are
// immutable once inserted; callers copy them outside the lock.
#ifndef KVSTORE_LIBKVSTORE_TIERS_MEMORY_TIER_H_
#define KVSTORE_LIBKVSTORE_TIERS_MEMORY_TIER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvstore/cache.h"
#include "libkvstore/tiers/granule_index.h"

namespace kvstore {

class MemoryTier {
 public:
  MemoryTier(int64_t max_entries, int64_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  struct Found {
    std::shared_ptr<const PromptCache> cache;
    int64_t length = 0;  // tokens the entry holds
    int64_t common = 0;  // tokens it shares with the query (== length for a prefix entry)
  };
  struct Lookup {
    std::optional<Found> prefix;  // the longest stored prefix of the query
    std::optional<Found> longer;  // a trimmable entry sharing more than `prefix` holds
  };
  // Both candidates; each one found becomes the most recently used.
  Lookup Find(const std::string& model, std::span<const int32_t> tokens);

  // Stores `cache` (holding `tokens`), replacing the entry of the same
  // key, then evicts over budget (possibly this very entry).
  void Insert(const std::string& model, std::span<const int32_t> tokens, std::shared_ptr<const PromptCache> cache,
              int64_t bytes, bool trimmable);

  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    std::string model;
    std::vector<int32_t> tokens;
    std::shared_ptr<const PromptCache> cache;
    int64_t bytes = 0;
    bool trimmable = false;
    std::vector<uint64_t> granules;  // registered prefix hashes (trimmable entries)
    std::list<uint64_t>::iterator lru;
  };
  void Erase(uint64_t key_hash);
  void Touch(Entry& e);

  int64_t max_entries_;
  int64_t max_bytes_;
  std::unordered_map<uint64_t, Entry> entries_;                // key hash -> entry
  GranuleIndex<uint64_t> granules_;                            // trimmable entries, by key hash
  std::list<uint64_t> lru_;                                    // front = most recent
  int64_t bytes_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_MEMORY_TIER_H_
