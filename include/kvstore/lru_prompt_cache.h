// LRUPromptCache: mlx-lm's store of prompt caches for reuse across requests
// (cache.py LRUPromptCache), reproduced faithfully, quirks included.
//
// Entries are keyed by (model, tokens) in a PromptTrie. Each entry belongs
// to a tier (cache_type): "assistant", "user" or "system", with one FIFO
// queue of keys per tier. "LRU" is upstream's name: recency changes only on
// insert (fetching does not refresh an entry), and the victim is chosen
// across tiers as follows, comparing queue lengths:
//   the oldest assistant entry if assistant is non-empty and
//     len(assistant) >= len(user); else
//   the oldest user entry if user is non-empty and len(user) >= len(system);
//   else the oldest system entry.
// Lower tiers are preferred victims but the tiers stay roughly balanced;
// e.g. counts (A,U,S) = (1,2,0) evict a user entry, (2,1,0) an assistant
// entry, (0,0,1) the system entry.
//
// Ownership: the cache keeps references (shared_ptr) to the caches it is
// given and hands out deep copies. Callers must not mutate a cache after
// inserting it.
//
// Threads: not thread-safe (mlx-lm's server guards it with a lock). One
// thread at a time may call a mutating member; const members, including
// FetchNearestCache, may run concurrently with each other only.
#ifndef KVSTORE_LRU_PROMPT_CACHE_H_
#define KVSTORE_LRU_PROMPT_CACHE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/prompt_trie.h"
#include "kvstore/status.h"

namespace kvstore {

// The tiers, in eviction-preference order.
enum class CacheType : uint8_t { kAssistant = 0, kUser = 1, kSystem = 2 };
inline constexpr size_t kNumCacheTypes = 3;
inline constexpr std::array<CacheType, kNumCacheTypes> kCacheTypes = {
    CacheType::kAssistant, CacheType::kUser, CacheType::kSystem};

// "assistant", "user", "system".
std::string_view CacheTypeName(CacheType type);
// Inverse of CacheTypeName (exact match); NotFound for any other name, where
// mlx-lm raises KeyError. (mlx-lm has by then already added the entry's
// bytes to its total; parsing first leaves our cache untouched.)
Result<CacheType> ParseCacheType(std::string_view name);

// A (model, tokens) key, as kept in the tier queues.
struct PromptKey {
  std::string model;
  std::vector<int32_t> tokens;
  friend bool operator==(const PromptKey&, const PromptKey&) = default;
};

// The entry count and bytes of one cache_type (stats_by_type).
struct CacheTypeStats {
  int64_t n_sequences = 0;
  int64_t n_bytes = 0;
  friend bool operator==(const CacheTypeStats&, const CacheTypeStats&) = default;
};

namespace internal {

// mlx-lm's LRUPromptCache bookkeeping without the caches: the trie of
// (model, tokens) keys, the tier queues, the byte totals, which entry a
// fetch serves and which entries an insert or trim_to removes. The owner
// keeps each entry's caches under its Id: LRUPromptCache keeps layers,
// ServerPromptCache's mlx-lm memory policy keeps MemoryEntry objects.
// Not thread-safe.
class LruPromptCore {
 public:
  using Id = uint64_t;
  struct Entry {
    Id id = 0;
    int64_t nbytes = 0;
    bool trimmable = false;  // every layer can be trimmed (can_trim_prompt_cache)
    CacheType cache_type = CacheType::kAssistant;
  };
  // What fetch_nearest_cache serves: entry `id`, which holds `length`
  // tokens, copied and trimmed by length - reused; the query's first
  // `reused` tokens are covered and tokens[reused:] remain.
  struct Nearest {
    Id id = 0;
    int64_t length = 0;
    int64_t reused = 0;
  };

  LruPromptCore(int64_t max_size, int64_t max_bytes) : max_size_(max_size), max_bytes_(max_bytes) {}

  // insert_cache's steps 2-5 (LRUPromptCache::InsertCache) for `entry`.
  // Returns the ids of the entries that left: the one replaced, the
  // prefixes, the evicted (possibly entry.id itself).
  std::vector<Id> Insert(std::string_view model, std::span<const int32_t> tokens, const Entry& entry);
  // fetch_nearest_cache's choice (LRUPromptCache::FetchNearestCache); nullopt on a miss.
  std::optional<Nearest> Find(std::string_view model, std::span<const int32_t> tokens) const;
  // trim_to; returns the ids evicted.
  std::vector<Id> TrimTo(std::optional<int64_t> n_sequences, std::optional<int64_t> n_bytes);

  std::array<CacheTypeStats, kNumCacheTypes> StatsByType() const;
  int64_t size() const;
  int64_t nbytes() const { return n_bytes_; }
  int64_t max_size() const { return max_size_; }
  int64_t max_bytes() const { return max_bytes_; }
  std::vector<PromptKey> Order(CacheType cache_type) const;
  // Every entry in trie order (models in insertion order, then pre-order).
  void ForEach(const std::function<void(std::string_view, std::span<const int32_t>, const Entry&)>& fn) const;

 private:
  static size_t Tier(CacheType type) { return static_cast<size_t>(type); }
  void Forget(const Entry& entry);
  // Drops the first key equal to `key`, checking tiers in order (CacheOrder.remove).
  void RemoveFromOrder(const PromptKey& key);
  // Evicts one entry chosen by the tier rule and returns its id. REQUIRES: size() > 0.
  Id EvictOne();

  int64_t max_size_;
  int64_t max_bytes_;
  PromptTrie<Entry> trie_;
  std::array<std::deque<PromptKey>, kNumCacheTypes> order_;
  int64_t n_bytes_ = 0;
  std::array<int64_t, kNumCacheTypes> n_bytes_by_type_{};
};

}  // namespace internal

class LRUPromptCache {
 public:
  static constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

  struct CacheEntry {
    PromptCache prompt_cache;
    int64_t nbytes = 0;  // sum of the layers' Nbytes() at insertion
    CacheType cache_type = CacheType::kAssistant;
  };

  // Result of FetchNearestCache: a deep copy of the nearest cache (nullopt on
  // a miss) and the tokens still to be processed with it.
  struct FetchResult {
    std::optional<PromptCache> cache;
    std::vector<int32_t> remaining;
  };

  using TypeStats = CacheTypeStats;

  // One stored entry, for snapshots.
  struct EntryInfo {
    std::string model;
    std::vector<int32_t> tokens;
    CacheType cache_type = CacheType::kAssistant;
    int64_t nbytes = 0;
    std::vector<std::string> classes;  // class_name() of each layer
  };

  // max_size bounds the number of entries, max_bytes the sum of their
  // nbytes (mlx-lm's 1 << 63 is kNoLimit). Neither is validated, as upstream.
  explicit LRUPromptCache(int64_t max_size = 10, int64_t max_bytes = kNoLimit);

  LRUPromptCache(const LRUPromptCache&) = delete;
  LRUPromptCache& operator=(const LRUPromptCache&) = delete;

  // insert_cache: stores `prompt_cache` (by reference) under (model, tokens)
  // in tier `cache_type`, as the most recent entry of that tier:
  //  1. nbytes = sum of the layers' Nbytes(), computed once, here;
  //  2. an entry already stored under the same key is replaced and leaves
  //     its tier's queue (so a re-insert can move a key to another tier);
  //  3. when every layer is trimmable (CanTrimPromptCache; true for no
  //     layers), the entries at every strict prefix of `tokens` (the empty
  //     one included) are removed: this entry can be trimmed to serve them;
  //  4. if size() > max_size, one entry is evicted (by the rule above; it can
  //     be the entry just inserted);
  //  5. then entries are evicted while nbytes() > max_bytes.
  // Error: a layer's Nbytes() error, before any change.
  // REQUIRES: no layer is null.
  Status InsertCache(std::string_view model, std::span<const int32_t> tokens,
                     PromptCache prompt_cache, CacheType cache_type = CacheType::kAssistant);

  // fetch_nearest_cache, with mlx-lm's preference order:
  //  1. an entry for exactly `tokens`: its copy, remaining [];
  //  2. else an entry `longer` that extends the common prefix, when
  //     common_prefix > len(shorter, or 0 without one) and every layer of the
  //     entry is trimmable: its copy trimmed (TrimPromptCache) by
  //     len(longer) - p with p = min(len(tokens) - 1, common_prefix), and
  //     remaining = tokens[p:], which always keeps at least one token;
  //  3. else the `shorter` entry (at least 2 tokens, see PromptTrie::Search):
  //     its copy, remaining = tokens[len(shorter):];
  //  4. else a miss: nullopt and all of `tokens`.
  // Copies are deep (Cache::Copy(); a layer that appears twice in an entry
  // is copied once and appears twice in the copy). Does not change recency.
  // Whether an entry is trimmable is taken at insertion (a stored cache
  // does not change).
  // Error: a Trim error of step 2 (the stored entry is not affected).
  Result<FetchResult> FetchNearestCache(std::string_view model,
                                        std::span<const int32_t> tokens) const;

  // trim_to: evicts (same rule) while size() > n_sequences, then while
  // nbytes() > n_bytes. Negative bounds count as 0; nullopt is no bound.
  void TrimTo(std::optional<int64_t> n_sequences, std::optional<int64_t> n_bytes);

  // stats_by_type, indexed by CacheType: each tier's entry count and bytes.
  std::array<TypeStats, kNumCacheTypes> StatsByType() const { return core_.StatsByType(); }

  // len() and nbytes.
  int64_t size() const { return core_.size(); }
  int64_t nbytes() const { return core_.nbytes(); }
  int64_t max_size() const { return core_.max_size(); }
  int64_t max_bytes() const { return core_.max_bytes(); }

  // The tier's eviction queue, oldest first.
  std::vector<PromptKey> Order(CacheType cache_type) const { return core_.Order(cache_type); }
  // Every entry in trie order (models in insertion order, then pre-order).
  std::vector<EntryInfo> Entries() const;

 private:
  void Release(const std::vector<internal::LruPromptCore::Id>& ids);

  internal::LruPromptCore core_;
  std::unordered_map<internal::LruPromptCore::Id, CacheEntry> entries_;
  internal::LruPromptCore::Id next_id_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_LRU_PROMPT_CACHE_H_
