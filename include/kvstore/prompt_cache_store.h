// PromptCacheStore: a directory of prompt-cache files keyed by (model key,
// token prefix) — the disk tier behind ServerPromptCache.
//
// Each entry is one file "<16 hex digits>.safetensors" in this project's
// format with integrity on; the model key and the token ids live in the
// file's metadata (1.kvstore_model, 1.kvstore_tokens), and the file's name
// is a hash of them, so the index is rebuilt from the files alone. Entries
// that share a prefix share its bytes: a delta entry holds only the rows
// after the tokens it shares with a whole entry, its base
// (PromptCacheStoreOptions::share_prefixes, docs/format.md §8.8). The
// file also records the model fingerprint of its cache
// (1.kvstore_fingerprint, kvstore/model_fingerprint.h): a fetch that names
// a fingerprint refuses, without loading it, an entry written for another
// model configuration under the same model key, and says why
// (fingerprint_refused(), last_refusal()).
//
// Open() returns as soon as it holds the directory: it reads no entry, so
// a restart serves at once however many entries the store holds. The
// directory is indexed after Open on a worker of the library's pool: the temp
// files a killed writer left are removed ("<entry>.kvtmp-<pid>-*",
// and "kvstore-models.json.kvtmp-*" of the Python tiers, when process <pid>
// is gone; other files' temp files, e.g. a kvtool output being written into
// the directory, are left alone); a file the manifest (<dir>/MANIFEST, one
// line per added or removed entry) lists with a matching size and a name
// that agrees with the
// listed key is indexed without being read; any other file's header is read
// (no tensor bytes), and files that are truncated, unparsable, of an unknown
// layout, lack the keys or digests, hold a layer that cannot be loaded as
// its header describes it (ValidatePromptCacheFile's rules), or whose name
// is not the one their key gives are dropped; a file it cannot read for an
// I/O error is left in place, not indexed. The manifest is then rewritten
// (one line per entry) and the store evicted to max_bytes. Until that is
// done, a fetch finds the entries whose keys are prefixes of its prompt by
// their file names (one name per prompt token), eviction waits, and
// entries() counts what is indexed so far. The manifest is a hint, never
// trusted for content.
//
// Never wrong KV: a fetch loads by mmap, verifies the digests and compares
// the key recorded in the file with the key asked for, and every layer's
// token offset with the key's length. A corrupt, missing or renamed file
// (layers holding another number of tokens than the key included), or one
// holding another key, is a miss: the entry is dropped (its file removed),
// counted (corrupt_dropped(), mismatched_dropped()), and the next shorter
// stored prefix is tried. A longest-prefix lookup costs
// O(prompt) (one incremental hash per prefix length, exact key comparison
// on a hash match). Disk usage is bounded by max_bytes with LRU eviction.
//
// Many processes may share a directory (servers of one machine started with
// the same path). Every store appends its changes to the manifest with
// O_APPEND, one write per line, and follows it: at each fetch and put, a
// stat of MANIFEST, and when it grew, the new lines are read, so an entry
// another process wrote is served by the next fetch after its line, and
// one it removed is forgotten. Entries are only ever renamed into place
// whole and verified at every load, so a torn, evicted, replaced or
// foreign file is a miss, never wrong KV. The budget holds across the
// processes: each one evicts, least recently used by its own fetches
// first (another process's entries count from when their line was read),
// until the entries the manifest lists fit max_bytes, so the directory
// holds at most max_bytes plus the entries being written (one per writing
// process); two processes may evict at once, and then evict a little more
// than needed. Give every process the same max_bytes. A file a race leaves
// unlisted (a line lost to a concurrent compaction) is indexed from its
// header by the next Open. A process killed at any point leaves only temp
// files, removed by the next Open once it is gone. (The LOCK file of older
// releases, which let one process in, is no longer taken.)
// Thread-safe: all members may be called concurrently;
// loads and saves run outside the store's lock, while a Put's final rename
// and its index update happen together under it (so a concurrent fetch
// that drops the file it replaces, or an eviction, cannot remove the new
// file before it is indexed).
#ifndef KVSTORE_PROMPT_CACHE_STORE_H_
#define KVSTORE_PROMPT_CACHE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/digest.h"
#include "kvstore/env.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/status.h"
#include "kvstore/tenant_salt.h"

namespace kvstore {

struct PromptCacheStoreOptions {
  int64_t max_bytes = int64_t{16} << 30;
  // The entries' digests: XXH3-128 (memory speed; the risk here is bit rot
  // and torn writes, not an adversary) or SHA-256. Every load verifies them
  // whichever the file declares.
  DigestAlgorithm digest = DigestAlgorithm::kXxh3_128;
  // Entries are written temp file + rename without fsync: a crash loses or
  // tears an entry, and the verified load counts it as a miss. true brings
  // back the file and directory fsyncs.
  bool durable = false;
  // Entries that share a prefix share its bytes: a Put whose prompt shares
  // at least 32 tokens with a stored whole entry of the same model
  // configuration writes only the rows after them, a delta entry naming
  // that entry as its base (models whose every layer is a KVCache,
  // QuantizedKVCache or ChunkedKVCache; others are always written whole).
  // A fetch of a delta entry loads and verifies both files and joins their
  // rows; evicting or replacing a base removes the delta entries on it, and
  // a delta entry whose base is gone or is another file of the same key is
  // a miss (mismatched_dropped()). false: every entry is whole.
  bool share_prefixes = true;
};

struct StoreOpenReport {
  int64_t entries = 0;           // in the index once the directory is indexed
  int64_t from_manifest = 0;     // indexed without reading the file
  int64_t manifest_ignored = 0;  // lines that disagreed with their file (size, or name vs key): file read instead
  std::vector<std::string> dropped;  // "<file>: <reason>"
  int64_t temp_files_removed = 0;    // left by writers killed mid-write
};

class PromptCacheStore {
 public:
  // Opens `dir` (created if missing; a leading "~" is the home directory,
  // ExpandUserPath); it is indexed after Open returns, as described above.
  // FailedPrecondition when another process holds it, InvalidArgument for a
  // "~" that cannot be expanded, or the Env's error. With `report`, Open
  // indexes the directory before it returns (as it does when no thread can be
  // started) and fills in what was indexed and dropped; an error indexing it
  // is then Open's.
  static Result<std::unique_ptr<PromptCacheStore>> Open(Env* env, const std::string& dir,
                                                        const PromptCacheStoreOptions& options,
                                                        StoreOpenReport* report = nullptr);
  // Stops indexing, if it still runs.
  ~PromptCacheStore();

  // Waits until the directory is indexed; what was indexed and dropped, or
  // the error that stopped the indexing (listing the directory, rewriting
  // the manifest).
  Result<StoreOpenReport> WaitUntilIndexed() const;

  PromptCacheStore(const PromptCacheStore&) = delete;
  PromptCacheStore& operator=(const PromptCacheStore&) = delete;

  // Saves (atomically) the cache for (model, tokens), replacing an entry
  // with the same key. When every layer of `cache` can be trimmed, the
  // stored entries of its strict prefixes (same model key and fingerprint)
  // of at least 32 tokens (a longer entry is found through its first 32k
  // tokens) are removed: this entry serves them, trimmed, as mlx-lm's
  // LRUPromptCache does in memory (prefixes_superseded()). Then evicts
  // least recently used files over budget.
  // Records the cache's fingerprint under `model` when it has one.
  // InvalidArgument for empty tokens (such an entry could never be served)
  // and for a layer (CacheList children included) whose token offset is not
  // tokens.size() (a RotatingKVCache counts every token it has seen; the
  // snapshot layers ArraysCache and MambaCache have no offset and are exempt).
  Status Put(const std::string& model, std::span<const int32_t> tokens, const PromptCache& cache);
  // The same under the key model.model_id() (with `tenant`:
  // SaltedStoreModelKey of it, so only fetches of that tenant find it),
  // recording `model`; InvalidArgument when the cache does not match it.
  Status Put(const ModelFingerprint& model, std::span<const int32_t> tokens, const PromptCache& cache,
             const TenantSalt* tenant = nullptr);

  struct Hit {
    PromptCache cache;
    int64_t length = 0;  // tokens the cache covers (a prefix of the query)
  };
  // The longest reusable prefix of `tokens`, loaded and verified: the entry
  // with the longest key that is a prefix of `tokens` (the whole of
  // `tokens` included), or, when an entry shares more tokens with `tokens`
  // than that one (a longer prompt, or one whose last message was edited)
  // and every layer of it can be trimmed, that entry trimmed to the tokens
  // it shares (found in O(prompt / 32) probes; an entry indexed at Open is
  // loaded once to learn whether it can be trimmed). nullopt on a miss. A
  // file that cannot be read for an I/O error is skipped but kept.
  Result<std::optional<Hit>> FetchLongestPrefix(const std::string& model, std::span<const int32_t> tokens);
  // The same for model.model_id(), served only from entries that record
  // this fingerprint; an entry that records another one (or none) is
  // refused before its tensors are read (counted, kept), and the loaded
  // layers are checked against the fingerprint too (a mismatch is dropped
  // like a file holding another key). With `tenant`, only that tenant's
  // entries (Put with the same tenant) are looked up. Only a hit of more
  // than `min_tokens` tokens is looked for: an entry that would serve fewer
  // is not read (what a caller holding a hit of min_tokens asks).
  Result<std::optional<Hit>> FetchLongestPrefix(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                                const TenantSalt* tenant = nullptr, int64_t min_tokens = 0);

  int64_t entries() const;
  int64_t bytes() const;
  // Entries dropped because their file failed to load or verify.
  int64_t corrupt_dropped() const;
  // Files dropped because the key they hold is not the one they were
  // indexed under: at Open (the name disagrees with the key in the header)
  // or at a fetch (the header disagrees with the manifest's key).
  int64_t mismatched_dropped() const;
  // Entries refused because they record another fingerprint (or none) than
  // the one a fetch asked for, and the reason of the last one:
  // "<file>: written for another model configuration: layer 0 (KVCache):
  // dtype F16 != BF16 (file != asked)".
  int64_t fingerprint_refused() const;
  std::string last_refusal() const;
  // Entries removed by a Put whose longer, trimmable entry serves them.
  int64_t prefixes_superseded() const;
  // The files removed as bad since the last call, each "<file>: <why>"
  // (failing to load or verify, holding another key or configuration than
  // indexed, dropped while indexing the directory), for a caller that logs
  // them: at most 64, then "and N more". Refused entries are kept and not
  // listed (last_refusal()).
  std::vector<std::string> TakeDropped();

 private:
  struct Impl;
  explicit PromptCacheStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_STORE_H_
