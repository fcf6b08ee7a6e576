// RedisConnection: one TCP connection to one Redis node and the RESP parser
// for its replies. The only code that touches hiredis (connect with a
// timeout, and its reply reader with our own reply objects); sending is plain
// socket I/O in redis_exchange.cc.
//
// After Connect the socket is non-blocking: ReadAvailable never waits, and
// callers poll() on fd() with their own deadline.
//
// Thread safety: a connection is used by one thread at a time (the pool
// hands it out exclusively).
#ifndef KVSTORE_LIBKVSTORE_REMOTE_REDIS_CONNECTION_H_
#define KVSTORE_LIBKVSTORE_REMOTE_REDIS_CONNECTION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/status.h"
#include "libkvstore/remote/redis_reply.h"

namespace kvstore {

class RedisReplyParser;

class RedisConnection {
 public:
  // Connects to host:port within `timeout` per address the host resolves
  // to (hiredis resolves names with getaddrinfo, which has no bound). IOError
  // names the node and the reason ("redis 127.0.0.1:6379: connect:
  // Connection refused"); `timed_out` tells whether the timeout expired.
  // `max_reply_bytes` bounds what one reply may buffer.
  static Result<std::unique_ptr<RedisConnection>> Connect(const std::string& host, uint16_t port,
                                                          std::chrono::milliseconds timeout,
                                                          size_t max_reply_bytes, bool& timed_out);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  int fd() const { return fd_; }
  const std::string& node() const { return node_; }  // "host:port"

  // Reads what the socket holds now, without waiting, and appends every
  // complete reply to `out`. Returns the bytes read (0: nothing was ready).
  // IOError when the server closed the connection, on a socket error, a
  // protocol violation, or a reply over max_reply_bytes; the connection is
  // unusable afterwards.
  Result<size_t> ReadAvailable(std::vector<RedisReply>& out);

  // True when bytes read so far end inside a reply (the parser holds part
  // of one). After the last expected reply that is a protocol violation:
  // those bytes would prefix the next call's reply.
  bool MidReply() const;

  // True when nothing is waiting on an idle connection: no bytes nobody
  // asked for, held by the parser or on the socket, and no end of file (a
  // server that restarted or closed idle clients). A pooled connection is
  // checked before it is reused, and given back only when this holds.
  bool IdleAndOpen() const;

 private:
  RedisConnection(void* context, std::string node, size_t max_reply_bytes);

  void* context_;  // redisContext*, owns the socket
  int fd_;
  std::string node_;
  std::unique_ptr<RedisReplyParser> parser_;
  std::vector<char> buffer_;
};

// Parses `bytes`, a concatenation of complete RESP replies (as a server
// would send them), with the same parser and limits as a connection. Used by
// tests and the fuzz target. IOError on a protocol violation or when the
// bytes end inside a reply.
Result<std::vector<RedisReply>> ParseRedisReplies(std::string_view bytes, size_t max_reply_bytes);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_REDIS_CONNECTION_H_
