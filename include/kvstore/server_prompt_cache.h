// ServerPromptCache: the prompt-reuse cache an inference server shares
// between request threads, and the one place that decides between its
// tiers (the Python package's TieredPromptCache is a binding of it):
//
//   memory  entries of this process, under a policy (MemoryPolicy);
//   disk    a PromptCacheStore (optional): a directory, which servers of one
//           machine may share;
//   shared  a SharedPromptCache (optional): chunks in Redis shared by every
//           server of the deployment.
//
// ServerPromptCache::Open opens the tiers its options name and owns them,
// with a model registry on the same directory and shared tier
// (kvstore/model_registry.h), so a server that knows only its model's id
// is served after a restart from its first fetch:
//
//   auto cache = kvstore::ServerPromptCache::Open({.directory = "/var/cache/kv"}).value();
//   std::optional<kvstore::ModelFingerprint> fp = cache->models().Find(model_id);
//   ... cache->Fetch(*fp, tokens) ... cache->Insert(cache->models().Learn(model_id, layers).value(), tokens, layers);
//
// Fetch consults memory, then disk, then the shared tier, and serves the
// longest reusable prefix any of them has: a stored prefix of the prompt,
// or a longer cached prompt trimmed to the common prefix when every layer
// can be trimmed, as mlx-lm's LRUPromptCache does when the last message
// was edited. A lower tier is asked whenever it could beat what the upper
// ones found: the disk (its index is in memory; it reads only an entry
// longer than the hit in hand), then the shared tier when a chunk boundary
// of the query lies past the best hit (a round trip, bounded by the
// backend's timeout, a miss after it). Every hit of a persistent tier
// leaves at least one token to process, under either policy: an entry
// holding the whole query is trimmed by one token, or, when it cannot be,
// the tier is asked for the query less that token (a checkpoint). Insert stores
// the cache in memory at once and queues it for the disk and shared tiers
// (bounded queues, written in the background; a full queue drops the
// write and counts it), so a request thread never waits for I/O.
//
// Memory policies:
//   kServer  true LRU over an entry and a byte budget (a fetch refreshes
//            recency); any prefix, 1 token included, is reusable; every
//            hit leaves at least one token to process, memory's too (an
//            exact match gives its last token back, or its checkpoint is
//            served); a disk or shared hit is kept in memory. Differences
//            from mlx-lm: docs/compat.md.
//   kMlxLm   memory is exactly mlx-lm's LRUPromptCache
//            (kvstore/lru_prompt_cache.h): tiers by cache_type, its trie
//            search (an exact match is served whole, remaining nothing, as
//            LRUPromptCache does), prefix removal and eviction. A persistent
//            hit leaves a token, as LRUPromptCache does when it trims a
//            longer entry, and is not kept in memory (mlx-lm's server
//            inserts the cache after generating).
// Each policy's rules are one object (libkvstore/tiers/serving_policy.h).
//
// Every persistent tier is keyed by the model fingerprint
// (kvstore/model_fingerprint.h): no fetch returns a cache made for another
// model or configuration. Every tier is also keyed by the request's tenant
// salt, when it has one (PromptScope::tenant): no fetch returns a prefix
// another tenant, or a request without a salt, inserted. Every count lands in metrics()
// (kvstore/prompt_cache_metrics.h).
//
// Thread safety: every member may be called from many threads. The lock is
// held only to look up or link entries, never while copying caches or doing
// I/O (each tier has its own lock).
#ifndef KVSTORE_SERVER_PROMPT_CACHE_H_
#define KVSTORE_SERVER_PROMPT_CACHE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/lru_prompt_cache.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/model_registry.h"
#include "kvstore/prompt_cache_metrics.h"
#include "kvstore/prompt_cache_store.h"
#include "kvstore/redis_backend.h"
#include "kvstore/shared_prompt_cache.h"
#include "kvstore/tenant_salt.h"

namespace kvstore {

class MemoryTier;
class ServingPolicy;
class Tier;

enum class MemoryPolicy { kServer, kMlxLm };
std::string_view MemoryPolicyName(MemoryPolicy policy);  // "server", "mlx-lm"
// Inverse of MemoryPolicyName; InvalidArgument for any other name.
Result<MemoryPolicy> ParseMemoryPolicy(std::string_view name);

// What the memory tier holds for one prompt. ServerPromptCache makes one of
// copy-on-write copies of the layers it is given; a binding may supply its
// own (PromptInsertOptions::memory_entry) holding its runtime's cache
// objects, which the tier stores and hands back (Hit::entry) without
// looking inside. Immutable once inserted; it may be released on any
// thread that calls ServerPromptCache, never under its lock.
class MemoryEntry {
 public:
  virtual ~MemoryEntry() = default;
  virtual int64_t bytes() const = 0;   // counted against max_bytes
  virtual bool trimmable() const = 0;  // every layer can give tokens back
  // The entry's kvstore layers, or nullptr for a binding's own objects.
  virtual const PromptCache* layers() const { return nullptr; }
};

struct ServerPromptCacheOptions {
  int64_t max_entries = 1024;
  int64_t max_bytes = int64_t{8} << 30;
  // The tiers ServerPromptCache::Open opens and owns, as LevelDB's DB::Open
  // owns its parts. The disk tier: a PromptCacheStore in `directory`
  // (created if missing; "": none), which also holds the model registry's
  // files (kvstore/model_registry.h).
  std::string directory{};
  PromptCacheStoreOptions disk_options{};
  // The shared tier: a SharedPromptCache on the Redis at redis.url (single
  // node or cluster; "": none), with shared_options (their backend and
  // async_insert are Open's: the cache's own write queue is used).
  RedisOptions redis{};
  SharedPromptCacheOptions shared_options{};
  Env* env = nullptr;  // nullptr: Env::Default()
  // Told why the model registry ignored a hint or could not write one (a
  // server logs it).
  std::function<void(const std::string&)> warn{};
  // Or tiers the caller opened and keeps open (a store two caches share,
  // tests): used as they are, not owned, must outlive the cache.
  PromptCacheStore* disk = nullptr;
  SharedPromptCache* shared = nullptr;
  MemoryPolicy memory_policy = MemoryPolicy::kServer;
  // Each persistent tier's writes wait in a queue of its own, of at most
  // this many caches and bytes (a cache larger than the byte bound is
  // queued only alone), for one writer thread; a newer write of a waiting
  // key replaces it (libkvstore/tiers/tier_writer.h).
  size_t write_queue_capacity = 16;
  int64_t write_queue_bytes = int64_t{1} << 30;
  bool async_writes = true;  // false: Insert writes the disk and shared tiers before returning
};

// Whose entries a call reads or writes. Every call for one model passes
// the same scope.
struct PromptScope {
  std::string memory_key{};  // the memory tier's key for the model
  // The persistent tiers' key; none: the call uses memory only.
  std::optional<ModelFingerprint> model{};
  // The request's tenant (vLLM's cache_salt): it enters the keys of every
  // tier (kvstore/tenant_salt.h), so requests of different tenants, or a
  // tenant and requests without one, never share a prefix. None: the keys
  // of requests without a salt.
  std::optional<TenantSalt> tenant{};
};

struct PromptInsertOptions {
  // Copies of the cache at earlier token counts (e.g. the end of the system
  // prompt or of a turn). Memory and disk keep each as an entry of its own
  // (what a cache that cannot be trimmed is served from); the shared tier
  // stores its chunks once and snapshot layers at those boundaries.
  std::span<const PromptCacheCheckpoint> checkpoints{};
  CacheType cache_type = CacheType::kAssistant;  // the mlx-lm policy's eviction tier
  // What the memory tier keeps instead of copies of `cache` (then used by
  // the persistent tiers only, and not checked for memory).
  std::shared_ptr<const MemoryEntry> memory_entry{};
  // The caller knows that `cache` matches scope.model (it checked, or made
  // the fingerprint from `cache` with ModelFingerprint::Of): not checked again.
  bool model_checked = false;
};

class ServerPromptCache {
 public:
  // Opens the tiers `options` names and a model registry on the directory
  // (and the shared tier): the tiers' errors (an unreachable Redis, a
  // directory that cannot be created, a Redis refusing the login).
  static Result<std::unique_ptr<ServerPromptCache>> Open(const ServerPromptCacheOptions& options);
  // Uses options.disk and options.shared only (what Open opens is ignored).
  explicit ServerPromptCache(const ServerPromptCacheOptions& options);
  // Finishes the writes queued for the disk and shared tiers.
  ~ServerPromptCache();

  struct Hit {
    PromptCache cache;   // private copies: the caller may append to them (empty when `entry` is set)
    int64_t reused = 0;  // tokens covered; tokens[reused:] remain to process
    PromptCacheTier tier = PromptCacheTier::kMemory;
    int64_t foreign_tokens = 0;  // shared tier: reused tokens that another server wrote
    // A memory hit on an entry a binding supplied: the entry, which holds
    // `entry_tokens` tokens; the caller copies it and trims the copy by
    // entry_tokens - reused.
    std::shared_ptr<const MemoryEntry> entry{};
    int64_t entry_tokens = 0;
  };
  // The longest reusable prefix of `tokens` across the tiers; nullopt on a
  // miss. Errors are the disk tier's (the shared tier turns its failures
  // into misses).
  Result<std::optional<Hit>> Fetch(const PromptScope& scope, std::span<const int32_t> tokens);
  // The scope keyed by the fingerprint's digest.
  Result<std::optional<Hit>> Fetch(const ModelFingerprint& model, std::span<const int32_t> tokens);

  // Stores `cache`, which holds `tokens`, in memory, and queues copies for
  // the disk and shared tiers (those of scope.model). InvalidArgument, with
  // nothing stored, when `tokens` is empty (the mlx-lm policy keeps such an
  // entry in memory only), a cache does not match scope.model, a checkpoint
  // lies outside `tokens`, or a layer (CacheList children included) has a
  // token offset other than the number of tokens it is stored under
  // ("layer 0 (KVCache): offset 50 != 100 tokens"; ArraysCache/MambaCache
  // snapshots have no offset and are exempt). With options.memory_entry the
  // entry is stored in memory whatever the checks of `cache` say, and a
  // refused `cache` is only not persisted (the error is returned). Counted
  // in metrics().inserts_refused. With async_writes off, also the
  // persistent tiers' errors.
  Status Insert(const PromptScope& scope, std::span<const int32_t> tokens, const PromptCache& cache,
                const PromptInsertOptions& options = {});
  Status Insert(const ModelFingerprint& model, std::span<const int32_t> tokens, const PromptCache& cache,
                std::span<const PromptCacheCheckpoint> checkpoints = {});

  // Evicts from memory, by the policy's order, until at most `entries`
  // entries and `bytes` bytes remain (nullopt: no bound; negative: 0).
  void TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes);

  // Waits until every write queued so far is in the disk and shared tiers.
  void Flush();
  // Flushes, then stops using the disk and shared tiers: later fetches use
  // memory only, later writes are dropped (counted). The caller may then
  // close them. Idempotent.
  void ClosePersistentTiers();

  struct Stats {
    int64_t entries = 0;  // memory tier
    int64_t bytes = 0;
    int64_t hits[3] = {0, 0, 0};  // by PromptCacheTier
    int64_t misses = 0;
    int64_t tokens_reused = 0;
  };
  Stats stats() const;
  std::array<CacheTypeStats, kNumCacheTypes> StatsByType() const;  // memory tier
  struct MemoryUsage {
    int64_t entries = 0;
    int64_t bytes = 0;
  };
  MemoryUsage memory_usage() const;  // the memory tier's entries and bytes, cheaply
  // Every counter, the tiers' own included (kvstore/prompt_cache_metrics.h).
  PromptCacheMetrics metrics() const;
  MemoryPolicy memory_policy() const { return options_.memory_policy; }
  // What a model key is served under (kvstore/model_registry.h): on the
  // directory and the shared tier of this cache.
  ModelRegistry& models() { return *models_; }
  // Whether a persistent tier is open (false without one, or once
  // ClosePersistentTiers began).
  bool persistent_open() const { return persistent_open_; }
  // The tiers themselves (null when absent), for their own counters.
  PromptCacheStore* disk() const { return disk_.get(); }
  SharedPromptCache* shared() const { return shared_.get(); }

 private:
  ServerPromptCache(const ServerPromptCacheOptions& options, std::shared_ptr<PromptCacheStore> disk,
                    std::shared_ptr<SharedPromptCache> shared);
  struct Candidate;
  // Copies and trims a candidate to what it serves; nullopt when a layer
  // cannot be trimmed exactly.
  Result<std::optional<Hit>> Serve(const Candidate& c);
  // The best hit `tier` offers for `tokens` reusing more than `have`
  // (under the policy's rules: how many tokens it may reuse; an entry
  // holding more that cannot be trimmed sends the tier back for the query
  // less its last token, where a checkpoint may be).
  Result<std::optional<Hit>> FromTier(Tier& tier, const std::string& key, const PromptScope& scope,
                                      std::span<const int32_t> tokens, int64_t have);
  // Checks `cache` before it is stored: the fingerprint, each layer's token count, the checkpoints.
  Status Check(const PromptScope& scope, std::span<const int32_t> tokens, const PromptCache& cache,
               std::span<const PromptCacheCheckpoint> checkpoints, bool model_checked);
  void Count(const std::optional<Hit>& hit, double seconds, const bool asked[kNumPromptCacheTiers],
             bool unknown_model);

  ServerPromptCacheOptions options_;
  const ServingPolicy& policy_;  // the rules of options_.memory_policy
  // The persistent tiers, owned (Open) or borrowed (a no-op deleter).
  std::shared_ptr<PromptCacheStore> disk_;
  std::shared_ptr<SharedPromptCache> shared_;
  std::unique_ptr<ModelRegistry> models_;
  std::unique_ptr<MemoryTier> memory_;
  std::vector<std::unique_ptr<Tier>> persistent_;  // disk, then shared: the order they are asked in
  std::atomic<bool> persistent_open_{false};       // some persistent tier is open
  mutable std::mutex mu_;
  PromptCacheMetrics counts_;  // guarded by mu_: the coordinator's own counters
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_PROMPT_CACHE_H_
