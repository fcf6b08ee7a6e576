// KvBackend: the byte-string key/value store behind the shared prompt-cache
// tier. Two implementations: Redis, single node or Redis Cluster
// (kvstore/redis_backend.h), and an in-memory double (NewMemKvBackend) for
// tests and tools.
//
// Contract of every implementation:
//   * Absent keys are not errors: they are nullopt / false in the results.
//   * Every call is bounded in time. A store that cannot answer within its
//     timeout yields IOError naming the endpoint ("redis 127.0.0.1:6379:
//     timeout after 50 ms"); a call never hangs.
//   * Values are opaque bytes: a backend never interprets them. Whatever a
//     backend returns is untrusted; callers check it before use.
//   * Batched calls are pipelined (one round trip per node) and keep the
//     order of their arguments in their results.
//
// Thread safety: every member may be called from many threads at once.
#ifndef KVSTORE_KV_BACKEND_H_
#define KVSTORE_KV_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/status.h"

namespace kvstore {

// One write of a batch. The views must stay valid for the call.
struct KvPut {
  std::string_view key;
  std::string_view value;
};

// Counters since the backend was opened; monotonic, for logs, tools, tests
// and benchmarks. A backend without a network leaves the transport ones 0.
struct KvBackendStats {
  uint64_t calls = 0;            // KvBackend calls made
  uint64_t failed_calls = 0;     // calls that returned an error
  uint64_t timeouts = 0;         // node exchanges cut off by their deadline
  uint64_t fast_failures = 0;    // calls refused at once: a node was in its backoff window
  uint64_t connects = 0;         // connections opened (first ones and reconnects)
  uint64_t moved = 0;            // MOVED replies followed
  uint64_t asked = 0;            // ASK replies followed
  uint64_t slot_map_loads = 0;   // cluster slot maps loaded (at open and after MOVED)
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

class KvBackend {
 public:
  virtual ~KvBackend() = default;

  // The value of each key (GET), nullopt where absent. A key holding
  // another type than a byte string (a Redis LIST, HASH, SET...: GET
  // answers WRONGTYPE) has no value: with `other_type` it reads as nullopt
  // and (*other_type)[i] is true (the vector gets one entry per key);
  // without, the call fails with FailedPrecondition naming it.
  virtual Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys,
                                                              std::vector<bool>* other_type) = 0;
  Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys) {
    return Get(keys, nullptr);
  }

  // Bytes [start, start + length) of a value (GETRANGE), shorter when the
  // value ends first; nullopt when the key is absent; FailedPrecondition
  // when it holds another type. REQUIRES: start >= 0, length >= 0.
  virtual Result<std::optional<std::string>> GetRange(std::string_view key, int64_t start,
                                                      int64_t length) = 0;

  // Whether each key exists (EXISTS), without transferring values.
  virtual Result<std::vector<bool>> Exists(std::span<const std::string> keys) = 0;

  // SET key value NX for each item; result[i] is true when this call wrote
  // item i, false when the key already existed (its value is left as is).
  virtual Result<std::vector<bool>> PutIfAbsent(std::span<const KvPut> items) = 0;

  // DEL of each key; absent keys are fine.
  virtual Status Delete(std::span<const std::string> keys) = 0;

  // Deletes `key` only while its value is still `expected`, atomically at
  // the store: true when this call deleted it, false when the key is absent
  // or holds another value (written since it was read, e.g. a good value
  // put back after a bad one was refused). Redis compares the value's
  // length and SHA-1 in a script, so `expected` itself is not sent.
  // A key holding another type is not `expected`: false.
  virtual Result<bool> DeleteIfEquals(std::string_view key, std::string_view expected) = 0;

  // The same compare-and-delete for a key that Get found holding another
  // type: deletes `key` only while it still holds another type than a byte
  // string; false when it is absent or holds a byte string (a value written
  // since, which may be a good one).
  virtual Result<bool> DeleteIfOtherType(std::string_view key) = 0;

  // Up to `limit` keys that start with `prefix` (SCAN MATCH on every node),
  // in no particular order.
  virtual Result<std::vector<std::string>> Scan(std::string_view prefix, size_t limit) = 0;

  // A one-line description for logs and tools, e.g.
  // "redis cluster 127.0.0.1:7000 (3 masters)" or "memory".
  virtual std::string Describe() const = 0;

  // Zeros for a backend that keeps no counters.
  virtual KvBackendStats Stats() const { return {}; }
};

// An in-memory KvBackend with no size bound. Used by tests, by the
// simulation without --redis, and as the reference for Redis's behaviour.
std::unique_ptr<KvBackend> NewMemKvBackend();

}  // namespace kvstore

#endif  // KVSTORE_KV_BACKEND_H_
