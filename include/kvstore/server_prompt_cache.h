// ServerPromptCache: the prompt-reuse cache an inference server shares
// between request threads, built for correctness under load.
//
// Differences from mlx-lm's LRUPromptCache (docs/compat.md): fetching
// refreshes recency (a true LRU); any prefix, 1 token included, is reusable;
// the byte budget is enforced at insert; a fetch returns copy-on-write
// copies (O(layers), no byte copy) so memory does not double; an exact
// match is served only when every layer trimmed the one token that must be
// left to process. Entries longer than the query are not served.
//
// Thread safety: every member may be called from many threads. The lock is
// held only to look up or link entries, never while copying caches or
// doing I/O (the disk tier has its own lock).
#ifndef KVSTORE_SERVER_PROMPT_CACHE_H_
#define KVSTORE_SERVER_PROMPT_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/prompt_cache_store.h"

namespace kvstore {

struct ServerPromptCacheOptions {
  int64_t max_entries = 1024;
  int64_t max_bytes = int64_t{8} << 30;
};

class ServerPromptCache {
 public:
  // `store` (optional, not owned) is consulted on a memory miss and written
  // on insert.
  explicit ServerPromptCache(const ServerPromptCacheOptions& options, PromptCacheStore* store = nullptr);

  struct Hit {
    PromptCache cache;    // private copies: the caller may append to them
    int64_t reused = 0;   // tokens covered; tokens[reused:] remain to process
    bool from_disk = false;
  };
  Result<std::optional<Hit>> Fetch(const std::string& model, std::span<const int32_t> tokens);

  // Stores copies of `cache` for (model, tokens) in memory (and on disk).
  Status Insert(const std::string& model, std::span<const int32_t> tokens, const PromptCache& cache);

  struct Stats {
    int64_t entries = 0;
    int64_t bytes = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::string model;
    std::vector<int32_t> tokens;
    std::shared_ptr<const PromptCache> cache;  // never mutated after insert
    int64_t bytes = 0;
    std::list<uint64_t>::iterator lru;
  };
  void EvictLocked();
  Result<std::optional<Hit>> Serve(std::shared_ptr<const PromptCache> cache, int64_t length,
                                   int64_t query_length, bool from_disk);

  ServerPromptCacheOptions options_;
  PromptCacheStore* store_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_;  // prefix hash -> entry
  std::list<uint64_t> lru_;                      // front = most recent
  int64_t bytes_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_PROMPT_CACHE_H_
