// The index of ServerPromptCache's memory tier (tier.h's MemoryTier):
// MemoryEntry objects by (model key, tokens) under one of two policies
// (kvstore/server_prompt_cache.h):
//   server  (memory_index_lru.cc)    true LRU; the longest stored prefix of a
//           query and a longer trimmable entry sharing more with it;
//   mlx-lm  (memory_index_mlx_lm.cc) mlx-lm's LRUPromptCache
//           (internal::LruPromptCore).
// Keys are always compared exactly: a hash match alone serves nothing.
// Not thread-safe: the memory tier's lock guards it. Entries are
// immutable; the tier hands out references, and returns the entries it
// drops so that they are released outside that lock.
#ifndef KVSTORE_LIBKVSTORE_TIERS_MEMORY_INDEX_H_
#define KVSTORE_LIBKVSTORE_TIERS_MEMORY_INDEX_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/server_prompt_cache.h"
#include "libkvstore/tiers/tier.h"

namespace kvstore {

class MemoryIndex {
 public:
  using EntryPtr = std::shared_ptr<const MemoryEntry>;

  virtual ~MemoryIndex() = default;

  // The entries that could serve `tokens` (the first tokens of a query),
  // each reusing at most `max_reused` tokens, the more promising first.
  // Server policy: each found becomes the most recently used.
  virtual std::vector<TierHit> Find(const std::string& model, std::span<const int32_t> tokens,
                                      int64_t max_reused) = 0;
  // Stores `entry` (holding `tokens`), replacing the entry of the same key,
  // then evicts over budget (possibly this very entry). Appends every entry
  // that left to `removed`.
  virtual void Insert(const std::string& model, std::span<const int32_t> tokens, EntryPtr entry, CacheType type,
                      std::vector<EntryPtr>& removed) = 0;
  // Evicts until at most `entries` entries and `bytes` bytes remain.
  virtual void TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes,
                      std::vector<EntryPtr>& removed) = 0;

  virtual int64_t entries() const = 0;
  virtual int64_t bytes() const = 0;
  virtual std::array<CacheTypeStats, kNumCacheTypes> StatsByType() const = 0;
};

std::unique_ptr<MemoryIndex> NewLruMemoryIndex(int64_t max_entries, int64_t max_bytes);
std::unique_ptr<MemoryIndex> NewMlxLmMemoryIndex(int64_t max_entries, int64_t max_bytes);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_MEMORY_INDEX_H_
