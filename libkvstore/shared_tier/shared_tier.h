// SharedPromptCache's internals, shared by its three implementation files:
// the per-model namespace state, the insert jobs and the counters.
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_SHARED_TIER_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_SHARED_TIER_H_

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kvstore/shared_prompt_cache.h"
#include "libkvstore/shared_tier/chunk_codec.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "libkvstore/shared_tier/chunk_layout.h"
#include "libkvstore/util/task_pool.h"
#include "libkvstore/util/task_queue.h"

namespace kvstore {

// A batched backend call's result, checked to hold one entry per argument
// (a backend that breaks that contract is an I/O error, not a crash).
template <typename T>
Result<std::vector<T>> OnePerKey(Result<std::vector<T>> got, size_t keys) {
  if (got.ok() && got->size() != keys) {
    return Status::IOError("shared tier: the backend answered " + std::to_string(got->size()) + " results for " +
                           std::to_string(keys) + " keys");
  }
  return got;
}

// One batch of GETs: each key's value, and which keys hold another type
// than a byte string (a Redis LIST where a chunk should be).
struct ValueBatch {
  std::vector<std::optional<std::string>> values;
  std::vector<bool> other_type;
};
Result<ValueBatch> GetValues(KvBackend& backend, std::span<const std::string> keys);

// What the tier knows about one model's namespace.
struct SharedNamespace {
  explicit SharedNamespace(ModelFingerprint model) : fingerprint(std::move(model)) {}
  ModelFingerprint fingerprint;
  ChunkNamespace ns;
  Status supported;              // NotSupported when the model cannot be chunked
  std::vector<LeafInfo> leaves;  // specs point into `fingerprint`
  bool needs_snapshots = false;  // some leaf is not a rows leaf
  bool has_snapshot_leaves = false;  // some leaf is only ever a snapshot
  int64_t chunk_bytes = 0;       // about the bytes of one chunk's value
  mutable std::atomic<bool> descriptor_written{false};
};

struct InsertJob {
  std::shared_ptr<const SharedNamespace> ns;
  std::vector<int32_t> tokens;
  PromptCache cache;  // copy-on-write copies: the caller may go on using its own
  std::vector<PromptCacheCheckpoint> checkpoints;
};

struct SharedPromptCache::Impl {
  SharedPromptCacheOptions options;
  // The seal's secret, empty for none (Open refuses an empty one).
  std::string_view secret() const { return options.secret ? std::string_view(*options.secret) : std::string_view(); }
  ChunkSealing sealing() const { return {secret(), options.key_prefix}; }
  // Encodes, decodes and overlaps backend calls for every fetch and insert
  // (the library's shared pool): no call starts a thread of its own.
  TaskPool* pool = &TaskPool::Shared();

  mutable std::mutex stats_mu;
  Stats stats;
  void Add(int64_t Stats::*field, int64_t n = 1) {
    std::lock_guard<std::mutex> l(stats_mu);
    stats.*field += n;
  }

  std::mutex ns_mu;
  // By fingerprint digest (and the tenant's key); emptied when it reaches kMaxCachedNamespaces.
  std::map<std::string, std::shared_ptr<const SharedNamespace>> namespaces;
  static constexpr size_t kMaxCachedNamespaces = 1024;
  std::shared_ptr<const SharedNamespace> NamespaceFor(const ModelFingerprint& model, const TenantSalt* tenant);

  // Asynchronous inserts: written on the pool by up to writer_threads
  // workers at once. Last, so that it is closed before the rest goes.
  std::optional<TaskQueue> inserts;

  // shared_fetch.cc
  Result<std::optional<Hit>> Fetch(const SharedNamespace& ns, std::span<const int32_t> tokens, int64_t min_tokens);
  // shared_insert.cc
  Status Write(const InsertJob& job);
  // The namespace descriptor and the model record, once per namespace.
  void Publish(const SharedNamespace& ns);

  // Counts a refused value (`why` its decoding status) and deletes its key
  // while it still holds `value` (nullptr: another type than a byte string),
  // never a value written since.
  void Refused(const std::string& key, const std::string* value, ChunkFault fault, const Status& why);
  // Refused, for a key found holding another type.
  void RefusedOtherType(const std::string& key);
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_SHARED_TIER_H_
