// The memory tier of ServerPromptCache: MemoryEntry objects by (model key,
// tokens) under one of two policies (kvstore/server_prompt_cache.h):
//   server  (memory_tier_lru.cc)    true LRU; the longest stored prefix of a
//           query and a longer trimmable entry sharing more with it;
//   mlx-lm  (memory_tier_mlx_lm.cc) mlx-lm's LRUPromptCache
//           (internal::LruPromptCore).
// Keys are always compared exactly: a hash match alone serves nothing.
// Not thread-safe: ServerPromptCache's lock guards it. Entries are
// immutable; the tier hands out references, and returns the entries it
// drops so that they are released outside that lock.
#ifndef KVSTORE_LIBKVSTORE_TIERS_MEMORY_TIER_H_
#define KVSTORE_LIBKVSTORE_TIERS_MEMORY_TIER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/server_prompt_cache.h"

namespace kvstore {

class MemoryTier {
 public:
  using EntryPtr = std::shared_ptr<const MemoryEntry>;
  struct Candidate {
    EntryPtr entry;
    int64_t length = 0;       // tokens the entry holds
    int64_t reused = 0;       // leading query tokens it serves (a copy trimmed by length - reused)
    bool whole_key = false;   // it holds exactly the tokens looked up
  };

  virtual ~MemoryTier() = default;

  // The entries that could serve `tokens` (the first tokens of a query),
  // each reusing at most `max_reused` tokens, the more promising first.
  // Server policy: each found becomes the most recently used.
  virtual std::vector<Candidate> Find(const std::string& model, std::span<const int32_t> tokens,
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

// The entries ServerPromptCache makes itself: kvstore layers (copies, or
// a cache a persistent tier loaded), their bytes and trimmability.
class LayersEntry final : public MemoryEntry {
 public:
  explicit LayersEntry(PromptCache layers);
  int64_t bytes() const override { return bytes_; }
  bool trimmable() const override { return trimmable_; }
  const PromptCache* layers() const override { return &layers_; }

 private:
  PromptCache layers_;
  int64_t bytes_ = 0;
  bool trimmable_ = false;
};

// Copy-on-write copies of every layer: O(layers), no byte copied.
PromptCache CopyLayers(const PromptCache& cache);
// The sum of the layers' Nbytes() (a layer that cannot tell counts 0).
int64_t CacheBytes(const PromptCache& cache);

std::unique_ptr<MemoryTier> NewLruMemoryTier(int64_t max_entries, int64_t max_bytes);
std::unique_ptr<MemoryTier> NewMlxLmMemoryTier(int64_t max_entries, int64_t max_bytes);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_MEMORY_TIER_H_
