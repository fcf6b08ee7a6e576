// PromptCacheStore's state, shared by its files: prompt_cache_store.cc
// (open, put, counters), prompt_cache_store_index.cc (indexing the
// directory after Open, and finding entries by name until then) and
// prompt_cache_store_fetch.cc (lookups and loads).
#ifndef KVSTORE_LIBKVSTORE_TIERS_PROMPT_CACHE_STORE_IMPL_H_
#define KVSTORE_LIBKVSTORE_TIERS_PROMPT_CACHE_STORE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvstore/prompt_cache_store.h"
#include "libkvstore/tiers/prefix_hash.h"
#include "libkvstore/tiers/store_format.h"
#include "libkvstore/tiers/store_index.h"
#include "libkvstore/util/task_pool.h"

namespace kvstore {

// What a file's header says about it as a store entry.
struct ScannedFile {
  StoreKey key;
  int64_t bytes = 0;
  std::optional<ModelFingerprint> fingerprint;
  std::string base;  // a delta entry's base file; empty for a whole entry
};

// Reads the header of a file (no tensor bytes); it must be one of our
// files with digests and a key, every layer must be loadable as the header
// describes it (PromptCacheInfo::valid), and a fingerprint it records must
// be valid. IOError when it cannot be read.
Result<ScannedFile> ScanFile(Env* env, const std::string& path);

// The model fingerprint a store file records (kvstore_fingerprint):
// nullopt when it records none, Corruption when it does not parse.
Result<std::optional<ModelFingerprint>> RecordedFingerprint(const Metadata& metadata);

std::string DigestHex(const std::optional<ModelFingerprint>& fp);

struct PromptCacheStore::Impl {
  Env* env;
  std::string dir;
  PromptCacheStoreOptions options;

  // Guarded by mu once Open has returned.
  mutable std::mutex mu;
  StoreIndex index;
  int64_t corrupt_dropped = 0;
  int64_t mismatched_dropped = 0;
  int64_t fingerprint_refused = 0;
  int64_t prefixes_superseded = 0;  // entries removed because a longer trimmable one serves them
  std::string last_refusal;
  std::atomic<uint64_t> next_staged{0};    // names Put's temp files

  // Indexing the directory (prompt_cache_store_index.cc), on a worker of
  // TaskPool::Shared() after Open (or within Open when no thread starts or
  // a report is wanted). Until `indexed`, eviction waits (the index does not hold
  // every file yet) and a fetch first finds the prompt's prefixes by their
  // file names.
  TaskPool::Pending<Status> indexing;
  std::atomic<bool> closing{false};  // the store is being destroyed: stop indexing
  bool indexed = false;
  std::condition_variable indexed_cv;
  StoreOpenReport open_report;
  Status index_status;
  // Lines logged while a compaction writes the new manifest (outside the
  // lock), for the new one; one compaction at a time.
  bool compacting = false;
  std::string unlogged;

  // Following the manifest, which every process sharing the directory
  // appends to (FollowManifest): the bytes read so far and its first line,
  // which names the file (a manifest compacted by another process since
  // is read again from its start). Guarded by follow_mu, never taken
  // under mu.
  std::mutex follow_mu;
  uint64_t followed = 0;
  std::string manifest_head;
  uint64_t compacted_bytes = 0;  // of the last manifest this process compacted

  std::string Path(const std::string& file) const { return dir + "/" + file; }

  void Add(StoreIndex::Entry entry) {
    const uint64_t hash = KeyHash(entry.key.model, entry.key.tokens);
    index.Insert(std::move(entry), hash);
  }

  void LogLocked(const std::string& line) {
    if (compacting) {
      unlogged += line;
      return;
    }
    // The manifest is a hint: a failed append only costs the other
    // processes this entry and this process a slower next start.
    (void)env->AppendToFile(Path("MANIFEST"), std::as_bytes(std::span(line)), options.durable);
  }

  void AddLocked(StoreIndex::Entry entry) {
    LogLocked(ManifestAddLine(entry.file, entry.bytes, entry.key.model, entry.key.tokens, entry.fingerprint,
                              entry.base));
    Add(std::move(entry));
  }

  void RemoveLocked(const std::string& file) {
    (void)env->RemoveFile(Path(file));
    LogLocked(ManifestRemoveLine(file));
  }

  // Removes `file` and the delta entries based on it, which cannot be
  // served without it.
  void EraseWithDependentsLocked(const std::string& file) {
    for (const std::string& dependent : index.DependentsOf(file)) {
      RemoveLocked(dependent);
      index.Erase(dependent);
    }
    RemoveLocked(file);
    index.Erase(file);
  }

  void EvictLocked() {
    if (!indexed) return;  // the indexer evicts once it knows every file
    while (index.bytes() > options.max_bytes && index.size() > 0) {
      EraseWithDependentsLocked(index.LeastRecent()->file);
    }
  }

  // Applies the lines other processes (and this one) appended to the
  // manifest since the last call: their entries are indexed (without
  // reading them: every load checks the file against its key), their
  // removals forgotten; then evicts over budget. A stat when nothing
  // changed. Skipped while another thread follows it, and until the
  // directory is indexed.
  void FollowManifest();

  // Removes the entries of (model, a strict prefix of `tokens`) written for
  // `fingerprint`. REQUIRES: hashes = PrefixHashes(model, tokens).
  void RemovePrefixesLocked(const std::string& model, const std::string& fingerprint,
                            std::span<const int32_t> tokens, std::span<const uint64_t> hashes);

  // Forgets a bad file unless it has been replaced since it was looked up.
  // `counter` is one of the counters above.
  void Drop(const std::string& file, uint64_t generation, int64_t& counter, const std::string& why) {
    std::lock_guard<std::mutex> l(mu);
    if (!index.Erase(file, generation)) return;
    RemoveLocked(file);
    NoteDroppedLocked(file + ": " + why);
    ++counter;
  }

  // Files removed as bad, for TakeDropped(): at most kMaxDroppedNotes wait.
  static constexpr size_t kMaxDroppedNotes = 64;
  std::vector<std::string> dropped_notes;
  int64_t dropped_unnoted = 0;
  void NoteDroppedLocked(std::string note) {
    if (dropped_notes.size() < kMaxDroppedNotes) {
      dropped_notes.push_back(std::move(note));
    } else {
      ++dropped_unnoted;
    }
  }

  // prompt_cache_store_index.cc
  // Indexes the directory: stale temp files, then the files the manifest
  // lists (without reading them, when its line agrees with the file's name
  // and size), then the headers of the others; rewrites the manifest and
  // evicts over budget. Sets `indexed` and `open_report` when done.
  Status IndexDirectory();
  void RemoveStaleTempFiles(const std::vector<std::string>& names, StoreOpenReport& report);
  void IndexFile(const std::string& name, const std::unordered_map<std::string, ManifestEntry>& listed,
                 StoreOpenReport& report);
  // Adds an entry the indexer found unless the file was indexed since (by a
  // Put or a fetch).
  bool AddFoundLocked(StoreIndex::Entry entry);
  // `listed_bytes`: what the indexer read of the manifest, from which
  // FollowManifest goes on when the compacted one cannot be written.
  Status CompactManifest(uint64_t listed_bytes, std::string listed_head);
  // Compacts while the store runs once the manifest has grown to four
  // times its compacted size (and at least kCompactAtBytes), so that it
  // stays about one line per entry however long the servers run.
  static constexpr uint64_t kCompactAtBytes = uint64_t{1} << 20;
  void CompactManifestIfLong();
  // `text` in a new synced file `staged`.
  Status StageManifest(const std::string& staged, std::string_view text);
  // When the store closes while the indexer compacts the manifest: the
  // lines logged meanwhile, appended to it.
  void SaveUnloggedLines();
  // Until the directory is indexed: indexes the entries whose keys are
  // prefixes of (model, tokens), found by their file names.
  void IndexPrefixesByName(const std::string& model, std::span<const int32_t> tokens);

  // `share`: a delta entry may be written (PromptCacheStoreOptions::share_prefixes).
  Status Put(const std::string& model, const std::optional<ModelFingerprint>& fingerprint,
             std::span<const int32_t> tokens, const PromptCache& cache, bool share = true);
  // A hit of more than `min_tokens` tokens (entries serving fewer are not read).
  Result<std::optional<Hit>> Fetch(const std::string& model, const ModelFingerprint* fingerprint,
                                   std::span<const int32_t> tokens, int64_t min_tokens);
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
  // them, and more than `min_tokens`, trimmed to those tokens, when every
  // layer can be trimmed.
  std::optional<Hit> FetchLonger(const std::string& model, const ModelFingerprint* fingerprint,
                                 std::span<const int32_t> tokens, std::span<const uint64_t> hashes,
                                 int64_t min_tokens);
  // prompt_cache_store_delta.cc
  // What a Put writes as a delta entry: the base and, one layer per leaf,
  // the rows of tokens [base.tokens, L).
  struct DeltaPlan {
    StoreBase base;
    PromptCache rows;
  };
  // The delta a Put of `cache` under (model, tokens) can write: on the whole
  // entry of the same model key and fingerprint sharing the most tokens
  // with it (at least kMinDeltaBase, fewer than all), when every leaf of
  // the model is a rows leaf (docs/format.md §8.3) and no delta entry is
  // based on the entry this Put replaces. nullopt: a whole entry is
  // written, also when the base is a
  // prefix of the prompt that the Put supersedes (`supersedes`: the cache
  // can be trimmed) and no delta entry needs. REQUIRES: hashes =
  // PrefixHashes(model, tokens).
  static constexpr int64_t kMinDeltaBase = 32;
  std::optional<DeltaPlan> PlanDelta(const std::string& model, const ModelFingerprint& fingerprint,
                                     std::span<const int32_t> tokens, const PromptCache& cache,
                                     std::span<const uint64_t> hashes, bool supersedes);
  // The cache of a delta entry holding `rows` for (model, key): its base's
  // rows [0, n) (loaded, verified, a whole entry holding model and key[0,
  // n)) joined with its own. Corruption or NotFound naming what is
  // wrong with the base.
  Result<PromptCache> JoinBase(const StoreBase& base, const ModelFingerprint& fingerprint, const std::string& model,
                               std::span<const int32_t> key, const PromptCache& rows);

  // Counts an entry written for another model configuration, with the reason.
  void Refuse(const std::string& file, const ModelFingerprint& asked);
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_PROMPT_CACHE_STORE_IMPL_H_
