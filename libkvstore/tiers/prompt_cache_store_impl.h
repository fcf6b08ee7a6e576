// PromptCacheStore's state, shared by its files: prompt_cache_store.cc
// (open, index, put) and prompt_cache_store_fetch.cc (lookups and loads).
#ifndef KVSTORE_LIBKVSTORE_TIERS_PROMPT_CACHE_STORE_IMPL_H_
#define KVSTORE_LIBKVSTORE_TIERS_PROMPT_CACHE_STORE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/prompt_cache_store.h"
#include "libkvstore/tiers/prefix_hash.h"
#include "libkvstore/tiers/store_format.h"
#include "libkvstore/tiers/store_index.h"

namespace kvstore {

struct PromptCacheStore::Impl {
  Env* env;
  std::string dir;
  PromptCacheStoreOptions options;
  std::unique_ptr<FileLock> lock;

  // Guarded by mu once Open has returned.
  mutable std::mutex mu;
  StoreIndex index;
  int64_t corrupt_dropped = 0;
  int64_t mismatched_dropped = 0;
  int64_t fingerprint_refused = 0;
  std::string last_refusal;
  std::unique_ptr<WritableFile> manifest;  // append-only log
  std::atomic<uint64_t> next_staged{0};    // names Put's temp files

  std::string Path(const std::string& file) const { return dir + "/" + file; }

  void Add(StoreIndex::Entry entry) {
    const uint64_t hash = KeyHash(entry.key.model, entry.key.tokens);
    index.Insert(std::move(entry), hash);
  }

  void LogLocked(const std::string& line) {
    if (manifest == nullptr) return;
    // The manifest is a hint: a failed append only costs a slower next start.
    if (manifest->Append(std::as_bytes(std::span(line))).ok()) (void)manifest->Sync();
  }

  void AddLocked(StoreIndex::Entry entry) {
    LogLocked(ManifestAddLine(entry.file, entry.bytes, entry.key.model, entry.key.tokens, entry.fingerprint));
    Add(std::move(entry));
  }

  void RemoveLocked(const std::string& file) {
    (void)env->RemoveFile(Path(file));
    LogLocked(ManifestRemoveLine(file));
  }

  void EvictLocked() {
    while (index.bytes() > options.max_bytes && index.size() > 0) {
      const std::string victim = index.LeastRecent()->file;
      RemoveLocked(victim);
      index.Erase(victim);
    }
  }

  // Forgets a bad file unless it has been replaced since it was looked up.
  // `counter` is one of the counters above.
  void Drop(const std::string& file, uint64_t generation, int64_t& counter) {
    std::lock_guard<std::mutex> l(mu);
    if (!index.Erase(file, generation)) return;
    RemoveLocked(file);
    ++counter;
  }

  Status IndexDirectory(StoreOpenReport& report);
  Status Put(const std::string& model, const std::optional<ModelFingerprint>& fingerprint,
             std::span<const int32_t> tokens, const PromptCache& cache);
  Result<std::optional<Hit>> Fetch(const std::string& model, const ModelFingerprint* fingerprint,
                                   std::span<const int32_t> tokens);
  // An index entry as a fetch copied it out under the lock.
  struct Candidate {
    std::string file;
    std::string fingerprint;  // hex digest recorded; empty when none
    uint64_t generation = 0;
  };
  // The entry's cache when it loads, verifies, holds `key` (and matches
  // `fingerprint`, when given); otherwise nullopt, the entry refused,
  // dropped or (an I/O error) kept as the rules above say.
  std::optional<PromptCache> LoadChecked(const Candidate& c, const std::string& model,
                                         const ModelFingerprint* fingerprint, std::span<const int32_t> key);
  // The entry sharing more tokens with `tokens` than any stored prefix of
  // them, trimmed to those tokens, when every layer can be trimmed.
  std::optional<Hit> FetchLonger(const std::string& model, const ModelFingerprint* fingerprint,
                                 std::span<const int32_t> tokens, std::span<const uint64_t> hashes);
  // Counts an entry written for another model configuration, with the reason.
  void Refuse(const std::string& file, const ModelFingerprint& asked);
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_PROMPT_CACHE_STORE_IMPL_H_
