// RedisNode: one Redis server (host:port) as the client sees it: a pool of
// idle authenticated connections and the backoff state that makes calls fail
// fast while the node is known to be down.
//
// Thread safety: all members may be called from many threads at once.
#ifndef KVSTORE_LIBKVSTORE_REMOTE_REDIS_NODE_H_
#define KVSTORE_LIBKVSTORE_REMOTE_REDIS_NODE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvstore/redis_backend.h"
#include "kvstore/status.h"
#include "libkvstore/remote/redis_connection.h"
#include "libkvstore/remote/redis_exchange.h"

namespace kvstore {

// Counters shared by every node of a backend (see KvBackendStats).
struct RedisCounters {
  std::atomic<uint64_t> calls{0}, failed_calls{0}, timeouts{0}, fast_failures{0}, connects{0},
      moved{0}, asked{0}, slot_map_loads{0}, bytes_sent{0}, bytes_received{0};

  void Add(const RedisTraffic& t) {
    bytes_sent += t.bytes_sent;
    bytes_received += t.bytes_received;
  }
};

// What every node of a backend shares: options, credentials and counters.
struct RedisNodeContext {
  RedisOptions options;
  RedisUrl url;  // credentials come from here
  RedisCounters counters;
};

class RedisNode {
 public:
  RedisNode(std::string host, uint16_t port, RedisNodeContext* context);

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  const std::string& name() const { return name_; }  // "host:port"

  // An idle connection that is still open, or a new one (connected and
  // authenticated). During the backoff window after a failure, IOError at
  // once, naming the failure. After the window one caller connects (the
  // probe) while the others still get IOError at once; its success closes
  // the window for all, its failure opens the next one. FailedPrecondition
  // when AUTH is refused.
  // A new connection's connect and AUTH run on the caller's `deadline`.
  Result<std::unique_ptr<RedisConnection>> Acquire(RedisDeadline& deadline);

  // Gives back a connection whose last exchange succeeded (kept while fewer
  // than max_idle_connections_per_node are idle, and only when it is idle
  // and open: nothing buffered, nothing waiting; otherwise closed).
  void Release(std::unique_ptr<RedisConnection> connection);

  // Records a transport failure (connect, I/O, timeout): drops the idle
  // connections, which may be as dead as the one that failed, and opens a
  // backoff window of backoff_initial * 2^(failures - 1), capped.
  void MarkFailed(const Status& why);

  // True while the backoff window is open.
  bool BackingOff() const;

 private:
  // `blame` tells whether a failure counts against the node (NodeToBlame).
  Result<std::unique_ptr<RedisConnection>> Connect(RedisDeadline& deadline, bool& blame);
  // The fast failure while backing off or probing. REQUIRES: mu_ held.
  Status Unavailable() const;

  const std::string host_;
  const uint16_t port_;
  const std::string name_;
  RedisNodeContext* const context_;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  int failures_ = 0;
  bool probing_ = false;  // a caller is connecting after the window
  std::chrono::steady_clock::time_point retry_after_{};
  Status last_failure_;
};

// Whether a step's failure counts against its node (opens its backoff
// window): always, except a timeout of a step that started with less than
// half of its own timeout (`own`) left on the call's deadline, which is the
// caller's time running out, not evidence that the node is down.
bool NodeToBlame(bool timed_out, std::chrono::milliseconds left_at_start,
                 std::chrono::milliseconds own);

// Runs one pipeline on `node`: acquire (unless `connection` is given, one
// of `node`'s), exchange, release (or mark failed). The replies, or the
// error of the connection or the exchange.
Result<std::vector<RedisReply>> RunOnNode(RedisNode& node, RedisPipeline pipeline,
                                          RedisDeadline& deadline, RedisNodeContext& context,
                                          std::unique_ptr<RedisConnection> connection = nullptr);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_REDIS_NODE_H_
