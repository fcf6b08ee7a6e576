// The tiers of ServerPromptCache (kvstore/server_prompt_cache.h), behind one
// interface: the coordinator asks memory, then disk, then the shared tier
// the same way, and each answers with the same hit type and writes through
// the same kind of queue (TierWriter).
//
//   memory  (tier_memory.cc) a MemoryIndex under its own lock; stores at once
//   disk    (tier_disk.cc)   a PromptCacheStore; writes queued on a TierWriter
//   shared  (tier_shared.cc) a SharedPromptCache; writes queued on a TierWriter
//
// A tier may own what it wraps or borrow it (a store the caller opened):
// both are a shared_ptr (a borrowed one with a no-op deleter).
//
// Thread safety: every member may be called from many threads.
#ifndef KVSTORE_LIBKVSTORE_TIERS_TIER_H_
#define KVSTORE_LIBKVSTORE_TIERS_TIER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/prompt_cache_metrics.h"
#include "kvstore/prompt_cache_store.h"
#include "kvstore/server_prompt_cache.h"
#include "kvstore/shared_prompt_cache.h"
#include "libkvstore/tiers/tier_writer.h"

namespace kvstore {

class MemoryIndex;
class ServingPolicy;

// A cache a tier holds for a query.
struct TierHit {
  std::shared_ptr<const MemoryEntry> entry;  // what the tier holds (a persistent tier: what it loaded)
  int64_t length = 0;          // tokens the entry holds
  int64_t reused = 0;          // leading query tokens it serves (a copy trimmed by length - reused)
  int64_t foreign_tokens = 0;  // the shared tier: tokens of it another server wrote
};

// What a Find asks.
struct TierQuery {
  std::string_view memory_key;             // the scope's memory key with its tenant
  const ModelFingerprint* model = nullptr;  // the persistent tiers' key: required by them
  const TenantSalt* tenant = nullptr;
  std::span<const int32_t> tokens;  // the first tokens of the query
  int64_t most = 0;                 // a hit reuses at most this many
  int64_t have = 0;                 // offer only hits reusing more than this (a tier may read less then)
};

// What a Store stores: the cache of `tokens` and copies at checkpoints.
struct TierWrite {
  std::string_view memory_key;
  const ModelFingerprint* model = nullptr;  // required by the persistent tiers
  const TenantSalt* tenant = nullptr;
  std::span<const int32_t> tokens;
  const PromptCache* cache = nullptr;  // the persistent tiers copy it
  std::span<const PromptCacheCheckpoint> checkpoints{};
  std::shared_ptr<const MemoryEntry> entry{};  // the memory tier stores it
  CacheType cache_type = CacheType::kAssistant;
};

class Tier {
 public:
  virtual ~Tier() = default;
  virtual PromptCacheTier id() const = 0;
  // Whether a hit could reuse more than `have` tokens of a `query`-token
  // query (the shared tier holds whole chunks only).
  virtual bool CouldServeMore(int64_t query, int64_t have) const { return query > have; }
  // The caches that could serve the query, the more promising first.
  // Errors are the tier's (the shared tier turns its failures into misses).
  virtual Result<std::vector<TierHit>> Find(const TierQuery& query) = 0;
  // Stores the write. A persistent tier queues copies and returns (a full
  // queue drops the write, counted); closed, it drops it.
  virtual Status Store(const TierWrite& write) = 0;
  // Waits until every write queued so far is stored.
  virtual void Flush() = 0;
  // Flush(), then finds nothing and drops every later write (counted); the
  // counters stay what they were. Idempotent.
  virtual void Close() = 0;
  // Adds the tier's own counters (entries, bytes, writes, refusals) to `m`.
  virtual void AddMetrics(PromptCacheMetrics& m) const = 0;
};

// The memory tier: what the coordinator asks first and keeps hits in, with
// the members only memory has.
class MemoryTier final : public Tier {
 public:
  explicit MemoryTier(std::unique_ptr<MemoryIndex> index);
  ~MemoryTier() override;

  PromptCacheTier id() const override { return PromptCacheTier::kMemory; }
  Result<std::vector<TierHit>> Find(const TierQuery& query) override;
  // Stores write.entry (or copies of write.cache) and a copy at each
  // checkpoint, then evicts over budget.
  Status Store(const TierWrite& write) override;
  void Flush() override {}
  void Close() override {}
  void AddMetrics(PromptCacheMetrics& m) const override;

  void TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes);
  ServerPromptCache::MemoryUsage usage() const;
  std::array<CacheTypeStats, kNumCacheTypes> StatsByType() const;

 private:
  // Inserts and releases what left outside the lock (entries may hold a
  // binding's objects).
  void Insert(std::string_view key, std::span<const int32_t> tokens, std::shared_ptr<const MemoryEntry> entry,
              CacheType type);

  mutable std::mutex mu_;
  std::unique_ptr<MemoryIndex> index_;  // guarded by mu_
};

// What the disk and shared tiers share: a TierWriter for their writes,
// and closing (once: the caller may close what the tier wraps as soon as the
// first Close returns; later, Find finds nothing and the counters are those
// at Close).
class PersistentTier : public Tier {
 public:
  explicit PersistentTier(const TierWriter::Options& writes) : writer_(writes) {}
  ~PersistentTier() override;  // finishes the queued writes (they hold what they use)

  Result<std::vector<TierHit>> Find(const TierQuery& query) final;
  void Flush() final;
  void Close() final;
  void AddMetrics(PromptCacheMetrics& m) const final;

 protected:
  // Find on the open tier, for a query of at least one token.
  virtual Result<std::vector<TierHit>> FindOpen(const TierQuery& query) = 0;
  // The counters of what the tier wraps (entries, writes it counts itself, refusals).
  virtual void AddOwnCounters(PromptCacheMetrics& m) const = 0;
  // The queue's counters, as this tier counts them.
  virtual void AddQueueCounters(const TierWriter::Stats& queue, PromptCacheMetrics& m) const = 0;
  // Waits for writes queued beyond writer() (a shared tier's own queue).
  virtual void FlushOwn() {}
  TierWriter& writer() { return writer_; }

 private:
  TierWriter writer_;
  std::once_flag closed_once_;
  mutable std::shared_mutex mu_;        // a Find holds it shared while it uses the tier
  bool closed_ = false;                 // guarded by mu_
  PromptCacheMetrics closed_counters_;  // guarded by mu_: AddOwnCounters at Close
};

std::unique_ptr<Tier> NewDiskTier(std::shared_ptr<PromptCacheStore> store, const TierWriter::Options& writes);
std::unique_ptr<Tier> NewSharedTier(std::shared_ptr<SharedPromptCache> shared, const TierWriter::Options& writes);

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

// The key under which a persistent tier's queue replaces a waiting write:
// (model, tenant, tokens), never another tenant's.
std::string TierWriteKey(const TierWrite& write, std::span<const int32_t> tokens);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_TIER_H_
