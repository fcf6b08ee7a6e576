// SharedPromptCache: the shared tier of prompt reuse. Server processes on
// many machines store their prompt caches in one key/value store (Redis,
// through a KvBackend) and reuse each other's prefixes.
//
// Layout (docs/format.md §8): a cache is cut into chunks of C tokens
// (chunk_tokens, fixed per namespace). Chunk i holds, for every layer, what
// extends the cache from i*C to (i+1)*C tokens; its key is a SHA-256 hash
// chain over (model fingerprint, C, tokens[0, (i+1)*C)) (keyed by the
// secret when one is set), so two prompts
// that share their first 10k tokens share those chunks whoever wrote them.
// Layers whose state cannot be cut by tokens (ArraysCache, MambaCache, a
// RotatingKVCache past its window) are stored as snapshots at the
// boundaries where the writer had them: the end of an insert that falls on
// a chunk boundary, and the checkpoints the caller hands over. A prefix is
// reusable up to the last boundary at which every layer can be rebuilt
// exactly; anything else is a miss. Only whole chunks are shared: the last
// partial chunk of a prompt stays in the memory and disk tiers.
//
// Never wrong KV: every value read is checked against what was asked
// (namespace, chain position, chain hashes, tokens, digests, each layer's
// class, dtype and shape; with a secret the AES-256-GCM envelope, bound to
// the key name and namespace, which hides every token and K/V byte) before
// it is used. A missing chunk ends the usable prefix there; a
// corrupt, forged or mismatched one is a miss, counted, and its key
// deleted unless another value has replaced it since it was read. A
// backend error or timeout is a miss, counted.
//
// Inserts are asynchronous by default: Insert copies the cache
// (copy-on-write, O(layers)) into a bounded queue and returns; a worker of
// the library's thread pool encodes and stores the chunks not yet there
// (one pipelined EXISTS, then SET NX in batches). When the queue is full
// the insert is dropped and counted, so a request thread never waits for
// the network.
//
// Thread safety: every member may be called from many threads at once.
#ifndef KVSTORE_SHARED_PROMPT_CACHE_H_
#define KVSTORE_SHARED_PROMPT_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kvstore/cache.h"
#include "kvstore/kv_backend.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/status.h"
#include "kvstore/tenant_salt.h"

namespace kvstore {

struct SharedPromptCacheOptions {
  KvBackend* backend = nullptr;        // required; not owned, must outlive the cache
  std::string key_prefix = "kvstore:";  // every key starts with it (an ACL user may be limited to it)
  int64_t chunk_tokens = 256;           // C: tokens per chunk, part of the namespace
  // Set: every value is encrypted and authenticated with AES-256-GCM under
  // keys derived from this secret (HKDF-SHA256), bound to its key name and
  // namespace, and key names are keyed by it (docs/format.md §8.6);
  // unsealed or forged values are refused. All servers sharing a key
  // prefix must use the same secret. nullopt: no seal. An
  // empty secret is refused (it would turn the seal off silently, e.g. from
  // an unset environment variable read with a "" default).
  std::optional<std::string> secret{};
  std::optional<int> compression_level{};  // zstd level for chunk values; unset: plain
  std::string writer_id{};               // recorded in chunks; empty: "<hostname>:<pid>"
  bool async_insert = true;              // false: Insert does the work before returning
  size_t insert_queue_capacity = 16;     // pending inserts beyond the running ones
  int writer_threads = 1;                // inserts written at once (each on a pool worker)
  // Value bytes per pipelined call; the next batch is encoded or decoded
  // while a call is in flight.
  size_t max_batch_bytes = size_t{8} << 20;
  // Threads encoding or decoding the chunks of one call (0: all cores),
  // the calling thread's included. Like the writers they come from the
  // library's one thread pool (a worker per core, shared by every cache
  // and file function in the process); no call starts a thread. When the
  // system refuses threads the pool runs with fewer, down to none (calls
  // then do the work themselves).
  int codec_threads = 0;
};

// A copy of the cache after its first `tokens` tokens, e.g. taken (with
// Cache::Copy, copy-on-write) at the end of each prefill step. It lets the
// shared tier store snapshot layers at that boundary, and rows a rotating
// window has dropped by the end of the prompt.
struct PromptCacheCheckpoint {
  int64_t tokens = 0;
  PromptCache cache{};
};

class SharedPromptCache {
 public:
  // InvalidArgument for a missing backend or what CheckOptions refuses;
  // ResourceExhausted when async_insert is on and not one writer thread can
  // be started.
  static Result<std::unique_ptr<SharedPromptCache>> Open(SharedPromptCacheOptions options);
  // The checks of Open that do not need the backend (so a caller can run
  // them before connecting): InvalidArgument for chunk_tokens < 1, no writer
  // thread, an empty key prefix, an empty secret or a compression level
  // outside ZstdLevels().
  static Status CheckOptions(const SharedPromptCacheOptions& options);
  // Finishes the inserts being written; queued ones are dropped (counted).
  ~SharedPromptCache();

  SharedPromptCache(const SharedPromptCache&) = delete;
  SharedPromptCache& operator=(const SharedPromptCache&) = delete;

  struct Hit {
    PromptCache cache;          // owned by the caller; holds `tokens` tokens
    int64_t tokens = 0;         // a multiple of chunk_tokens()
    int64_t foreign_tokens = 0;  // of those, tokens in chunks another writer_id wrote
  };

  // The longest reusable chunk-aligned prefix of `tokens` longer than
  // `min_tokens` tokens, rebuilt; nullopt on a miss. Backend failures and
  // bad values are misses (see stats()), never errors; a model the shared
  // tier cannot chunk (ConcatenateKVCache, batch caches) always misses.
  // With `tenant`, only that tenant's chunks are looked up (its own
  // namespace, docs/format.md §8.2).
  Result<std::optional<Hit>> Fetch(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                   int64_t min_tokens = 0, const TenantSalt* tenant = nullptr);

  // Stores the chunks of `cache` (which holds `tokens`) not yet in the
  // store, and snapshots at the chunk boundaries among the end of `tokens`
  // and the checkpoints' token counts (each REQUIRES tokens <= size of
  // `tokens`). Asynchronous by default: the caches are copied and the call
  // returns OK, also when the queue is full (then dropped and counted).
  // InvalidArgument when `cache` does not match `model`; with async_insert
  // off, also the backend's errors.
  // With `tenant`, the chunks go to that tenant's namespace.
  Status Insert(const ModelFingerprint& model, std::span<const int32_t> tokens, const PromptCache& cache,
                std::span<const PromptCacheCheckpoint> checkpoints = {}, const TenantSalt* tenant = nullptr);

  // Waits until the queue is empty and no insert is being written.
  void Flush();

  // The fingerprint another server published for `model_id` at this
  // chunk size (its model record, written with its first insert), so that
  // a server that joins a fleet is served from its first request; nullopt
  // when none is published or the record is refused (counted as forged or
  // corrupt), or on a backend error (counted). With a secret the record is
  // sealed like the values; without one it is only as trustworthy as
  // everyone who can write the store (docs/design.md).
  std::optional<ModelFingerprint> PublishedModel(std::string_view model_id);

  struct Stats {
    int64_t fetches = 0;
    int64_t hits = 0;
    int64_t tokens_served = 0;
    int64_t foreign_tokens_served = 0;  // served from chunks another writer wrote
    int64_t values_read = 0;
    int64_t bytes_read = 0;
    int64_t vanished = 0;    // present at EXISTS, gone at GET (evicted meanwhile)
    int64_t corrupt = 0;     // unreadable or failing their digests
    int64_t forged = 0;      // with a secret: no envelope, or one that does not open
    int64_t mismatched = 0;  // valid, but not the value asked for (copied or colliding)
    int64_t deleted = 0;     // keys deleted after one of the three above
    int64_t replaced_before_delete = 0;  // refused, but another value was written before the delete: kept
    int64_t rebuild_failures = 0;  // boundaries whose checked values did not rebuild (then a shorter one is tried)
    int64_t backend_errors = 0;
    int64_t unsupported = 0;  // calls for a model the tier cannot chunk
    int64_t inserts = 0;
    int64_t inserts_dropped = 0;  // queue full, or left queued at destruction
    int64_t insert_errors = 0;
    int64_t chunks_written = 0;
    int64_t chunks_present = 0;     // already stored by someone: skipped
    int64_t chunks_incomplete = 0;  // a layer lacked the rows: not written
    int64_t snapshots_written = 0;
    int64_t bytes_written = 0;  // value bytes this process stored
    int64_t models_published = 0;  // model records this process stored
    int64_t models_found = 0;      // PublishedModel calls answered
    std::string last_refusal;   // why the last refused value was refused
  };
  Stats stats() const;

  int64_t chunk_tokens() const;
  const std::string& writer_id() const;
  std::string Describe() const;  // "shared tier on <backend>, 256-token chunks, sealed"

  struct Impl;

 private:
  explicit SharedPromptCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstore

#endif  // KVSTORE_SHARED_PROMPT_CACHE_H_
