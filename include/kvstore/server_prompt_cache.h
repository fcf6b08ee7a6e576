// ServerPromptCache: the prompt-reuse cache an inference server shares
// between request threads, in front of up to three tiers:
//
//   memory  entries of this process (copy-on-write copies, LRU over an
//           entry and a byte budget);
//   disk    a PromptCacheStore (optional): a directory this process owns;
//   shared  a SharedPromptCache (optional): chunks in Redis shared by every
//           server of the deployment.
//
// Fetch consults memory, then disk, then the shared tier, and serves the
// longest reusable prefix any of them has: a stored prefix of the prompt,
// or (memory) a longer cached prompt trimmed to the common prefix when
// every layer can be trimmed, as mlx-lm's LRUPromptCache does when the
// last message was edited. A lower tier is asked only when it could beat
// what the upper ones found; a hit from disk or the shared tier is kept in
// memory for the next request. Insert stores the cache in memory, on disk
// (synchronously: a local file) and in the shared tier (asynchronously:
// queued, never waiting for the network).
//
// Every tier is keyed by the model fingerprint (kvstore/model_fingerprint.h):
// no fetch returns a cache made for another model or configuration.
//
// Differences from mlx-lm's LRUPromptCache (docs/compat.md): fetching
// refreshes recency (a true LRU); any prefix, 1 token included, is
// reusable; the byte budget is enforced at insert; a fetch returns
// copy-on-write copies (O(layers), no byte copy); an exact match is served
// only when every layer trimmed the one token that must be left to process;
// when they cannot, each tier is asked again for the prompt less its last
// token (a checkpoint there is served as is).
//
// Thread safety: every member may be called from many threads. The lock is
// held only to look up or link entries, never while copying caches or doing
// I/O (each tier has its own lock).
#ifndef KVSTORE_SERVER_PROMPT_CACHE_H_
#define KVSTORE_SERVER_PROMPT_CACHE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "kvstore/cache.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/prompt_cache_metrics.h"
#include "kvstore/prompt_cache_store.h"
#include "kvstore/shared_prompt_cache.h"

namespace kvstore {

class MemoryTier;

struct ServerPromptCacheOptions {
  int64_t max_entries = 1024;
  int64_t max_bytes = int64_t{8} << 30;
  PromptCacheStore* disk = nullptr;     // optional disk tier; not owned, must outlive the cache
  SharedPromptCache* shared = nullptr;  // optional shared tier; not owned, must outlive the cache
};

class ServerPromptCache {
 public:
  explicit ServerPromptCache(const ServerPromptCacheOptions& options);
  ~ServerPromptCache();

  struct Hit {
    PromptCache cache;   // private copies: the caller may append to them
    int64_t reused = 0;  // tokens covered; tokens[reused:] remain to process (at least one)
    PromptCacheTier tier = PromptCacheTier::kMemory;
    int64_t foreign_tokens = 0;  // shared tier: reused tokens that another server wrote
  };
  // The longest reusable prefix of `tokens` across the tiers; nullopt on a
  // miss. Errors are the disk tier's (the shared tier turns its failures
  // into misses).
  Result<std::optional<Hit>> Fetch(const ModelFingerprint& model, std::span<const int32_t> tokens);

  // Stores copies of `cache`, which holds `tokens`, in every tier, and the
  // checkpoints: copies of the cache at earlier token counts, e.g. at the
  // end of the system prompt or of a turn. Memory and disk keep each as an
  // entry of its own (what a cache that cannot be trimmed is served from);
  // the shared tier stores its chunks once and snapshot layers at those
  // boundaries. InvalidArgument when `tokens` is empty, a cache does not
  // match `model`, a checkpoint lies outside `tokens`, or a layer (CacheList
  // children included) has a token offset other than the number of tokens
  // it is stored under ("layer 0 (KVCache): offset 50 != 100 tokens";
  // ArraysCache/MambaCache snapshots have no offset and are exempt); the
  // disk tier's errors.
  Status Insert(const ModelFingerprint& model, std::span<const int32_t> tokens, const PromptCache& cache,
                std::span<const PromptCacheCheckpoint> checkpoints = {});

  struct Stats {
    int64_t entries = 0;  // memory tier
    int64_t bytes = 0;
    int64_t hits[3] = {0, 0, 0};  // by PromptCacheTier
    int64_t misses = 0;
    int64_t tokens_reused = 0;
  };
  Stats stats() const;

 private:
  struct Candidate;
  Result<std::optional<Hit>> Serve(const Candidate& c, std::span<const int32_t> tokens);
  Result<std::optional<Hit>> FromMemory(const std::string& key, std::span<const int32_t> tokens);
  // A disk hit reusing more than `reused` tokens, kept in memory too.
  Result<std::optional<Hit>> FromDisk(const ModelFingerprint& model, std::span<const int32_t> tokens, int64_t reused);
  void Remember(const std::string& key, std::span<const int32_t> tokens, const PromptCache& cache);
  void Count(const std::optional<Hit>& hit);

  ServerPromptCacheOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<MemoryTier> memory_;  // guarded by mu_
  Stats stats_;                         // guarded by mu_
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_PROMPT_CACHE_H_
