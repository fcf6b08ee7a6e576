// Pipelined request/reply rounds with a deadline.
//
// RedisPipeline encodes commands in RESP without copying large arguments
// (a 32 MiB value goes from the caller's buffer to the socket by sendmsg).
// RunExchanges sends several pipelines, each on its own connection, and
// reads all replies, every connection at once in one poll() loop, until
// done or the deadline.
#ifndef KVSTORE_LIBKVSTORE_REMOTE_REDIS_EXCHANGE_H_
#define KVSTORE_LIBKVSTORE_REMOTE_REDIS_EXCHANGE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/status.h"
#include "libkvstore/remote/redis_connection.h"
#include "libkvstore/remote/redis_reply.h"

namespace kvstore {

class RedisPipeline {
 public:
  // Appends one command. Arguments of kReferenceBytes or more are referenced,
  // not copied: they must outlive the exchange.
  void Add(std::initializer_list<std::string_view> args) { Add(std::span(args.begin(), args.size())); }
  void Add(std::span<const std::string_view> args);

  size_t commands() const { return commands_; }
  size_t bytes() const { return bytes_; }
  bool empty() const { return commands_ == 0; }

  // The encoded pipeline as (pointer, length) pieces, in order.
  struct Piece {
    const char* data;
    size_t size;
  };
  std::vector<Piece> Pieces() const;

  static constexpr size_t kReferenceBytes = 16 << 10;

 private:
  std::string inline_;  // headers and small arguments
  struct Segment {
    const char* external;  // nullptr: inline_[offset, offset + size)
    size_t offset;
    size_t size;
  };
  std::vector<Segment> segments_;
  size_t commands_ = 0;
  size_t bytes_ = 0;
};

// One connection's share of a round.
struct RedisExchange {
  RedisConnection* connection = nullptr;
  RedisPipeline pipeline;
  std::vector<RedisReply> replies;  // one per command, in order, when status is ok
  Status status;                    // this connection's outcome
  bool timed_out = false;
};

// When a call gives up. Two bounds, the earlier wins:
//   * `timeout` after the last byte moved (a stopped or dead server);
//   * `timeout` plus the bytes moved so far at `bytes_per_second` after
//     `start` (a server that dribbles); 0 bytes_per_second: `timeout` after start.
struct RedisDeadline {
  std::chrono::steady_clock::time_point start;
  std::chrono::milliseconds timeout;
  uint64_t bytes_per_second;
  uint64_t bytes_moved = 0;  // sent and received so far in this call

  std::chrono::steady_clock::time_point When(std::chrono::steady_clock::time_point last_progress) const;
  // What a step starting at `now` (a connect, or an exchange before its
  // first byte) may still take; zero when the call's time is up.
  std::chrono::milliseconds Remaining(std::chrono::steady_clock::time_point now) const;
};

struct RedisTraffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// Runs every exchange to completion or until the deadline (progress is
// counted from the call). Each exchange gets its own status: IOError on a
// socket or protocol error, on an extra reply, or "timeout after N ms".
void RunExchanges(std::span<RedisExchange*> exchanges, RedisDeadline& deadline,
                  RedisTraffic& traffic);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_REDIS_EXCHANGE_H_
