// PromptCacheStore: a directory of prompt-cache files keyed by (model key,
// token prefix) — the disk tier behind ServerPromptCache.
//
// Each entry is one file "<16 hex digits>.safetensors" in this project's
// format with integrity on; the model key and the token ids live in the
// file's metadata (1.kvstore_model, 1.kvstore_tokens), so the index is
// rebuilt from the files alone. Open() scans the headers (no tensor bytes),
// drops files that are truncated, unparsable, of an unknown layout or lack
// the keys, and removes temp files of dead writers. A fetch loads by mmap
// and verifies the digests: a corrupt file is a miss (and is removed),
// never wrong KV. Disk usage is bounded by max_bytes with LRU eviction.
//
// A manifest (<dir>/MANIFEST, one line per added or removed entry, compacted
// at Open) makes startup fast: files it lists with a matching size are
// indexed without reading them; anything else is scanned. The manifest is a
// hint, never trusted for content: every served file is verified.
//
// One process owns a directory at a time: Open() takes an exclusive lock on
// <dir>/LOCK and fails with FailedPrecondition ("held by another process")
// for a second owner. Thread-safe: all members may be called concurrently.
#ifndef KVSTORE_PROMPT_CACHE_STORE_H_
#define KVSTORE_PROMPT_CACHE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/env.h"
#include "kvstore/status.h"

namespace kvstore {

struct PromptCacheStoreOptions {
  int64_t max_bytes = int64_t{16} << 30;
};

struct StoreOpenReport {
  int64_t entries = 0;
  int64_t from_manifest = 0;  // indexed without reading the file
  std::vector<std::string> dropped;  // "<file>: <reason>"
};

class PromptCacheStore {
 public:
  static Result<std::unique_ptr<PromptCacheStore>> Open(Env* env, const std::string& dir,
                                                        const PromptCacheStoreOptions& options,
                                                        StoreOpenReport* report = nullptr);
  ~PromptCacheStore();

  // Saves (atomically) the cache for (model, tokens), replacing an entry
  // with the same key, then evicts least recently used files over budget.
  Status Put(const std::string& model, std::span<const int32_t> tokens, const PromptCache& cache);

  struct Hit {
    PromptCache cache;
    int64_t length = 0;  // tokens the cache covers (a prefix of the query)
  };
  // The entry with the longest key that is a prefix of `tokens` (the whole
  // of `tokens` included), loaded and verified; nullopt on a miss.
  Result<std::optional<Hit>> FetchLongestPrefix(const std::string& model, std::span<const int32_t> tokens);

  int64_t entries() const;
  int64_t bytes() const;
  int64_t corrupt_dropped() const;

 private:
  struct Entry {
    std::string file;
    int64_t bytes = 0;
    uint64_t last_use = 0;
  };
  PromptCacheStore(Env* env, std::string dir, PromptCacheStoreOptions options,
                   std::unique_ptr<FileLock> lock);
  void EvictLocked();
  void LogLocked(char op, const std::string& file, const std::string& model, std::span<const int32_t> tokens,
                 int64_t bytes);
  static std::string Key(const std::string& model, std::span<const int32_t> tokens);

  Env* env_;
  std::string dir_;
  PromptCacheStoreOptions options_;
  std::unique_ptr<FileLock> lock_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> index_;  // Key(model, tokens) -> entry
  int64_t bytes_ = 0;
  uint64_t clock_ = 0;
  int64_t corrupt_dropped_ = 0;
  std::unique_ptr<WritableFile> manifest_;  // append-only log
};

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_STORE_H_
