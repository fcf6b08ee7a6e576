// RedisLargeBulk: receives a large top-level bulk string reply
// ("$<len>\r\n<bytes>\r\n", what GET of a big value returns) straight into
// the std::string the caller gets, instead of through hiredis's growing
// buffer and a copy out of it. Bytes read from the socket go there directly
// (Target/Commit), so a 32 MiB value is copied by the kernel, plus the
// copies of its doubling buffer (less than its size in total).
//
// Hiredis-free on purpose: the connection wrapper decides which replies come
// here (only at a reply boundary); everything else goes to hiredis's reader.
#ifndef KVSTORE_LIBKVSTORE_REMOTE_REDIS_LARGE_BULK_H_
#define KVSTORE_LIBKVSTORE_REMOTE_REDIS_LARGE_BULK_H_

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "kvstore/status.h"

namespace kvstore {

class RedisLargeBulk {
 public:
  // Smaller bulk strings are left to hiredis: the copy costs less than a
  // second code path would save.
  static constexpr size_t kMinBytes = 64 << 10;
  // The buffer a new string starts with (or its length, when smaller); it
  // doubles as bytes arrive, up to the announced length.
  static constexpr size_t kFirstBytes = 1 << 20;

  // When `data` starts with a complete header "$<digits>\r\n" of a length
  // >= kMinBytes, starts receiving that string and returns the header's
  // size; 0 when this reply is not for us. Error text (no Status prefix)
  // when the length exceeds `max_bytes`.
  Result<size_t> Start(const char* data, size_t n, size_t max_bytes);

  bool active() const { return active_; }

  // Consumes body bytes and then the trailing CRLF; returns how many of the
  // `n` bytes it took. When the string is complete, `done` gets it.
  Result<size_t> Take(const char* data, size_t n, std::optional<std::string>& done);

  // The part of the body still missing (empty once the body is complete),
  // for reading the socket straight into it; Commit(n) after reading n bytes
  // (IOError when the buffer cannot grow for the next ones).
  std::span<char> Target();
  Status Commit(size_t n);

  // Bytes held for the string being received (its buffer so far).
  size_t buffered() const { return value_.size(); }

 private:
  Status Grow();

  bool active_ = false;
  std::string value_;  // [0, filled_) received; value_.size() <= length_
  size_t length_ = 0;  // announced
  size_t filled_ = 0;
  int crlf_seen_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_REMOTE_REDIS_LARGE_BULK_H_
