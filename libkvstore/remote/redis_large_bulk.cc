#include "libkvstore/remote/redis_large_bulk.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace kvstore {

Result<size_t> RedisLargeBulk::Start(const char* data, size_t n, size_t max_bytes) {
  // "$" + 1..19 digits + CRLF; anything else (nil "$-1", a split header,
  // a malformed one) is hiredis's to parse or refuse.
  constexpr size_t kMaxDigitsEnd = 20;  // 19 digits cannot overflow size_t
  if (n < 4 || data[0] != '$') return size_t{0};
  size_t length = 0, i = 1;
  for (; i < std::min(n, kMaxDigitsEnd) && data[i] >= '0' && data[i] <= '9'; ++i) {
    length = length * 10 + static_cast<size_t>(data[i] - '0');
  }
  if (i == 1 || i + 1 >= n || data[i] != '\r' || data[i + 1] != '\n' || length < kMinBytes ||
      (data[1] == '0' && i > 2)) {
    return size_t{0};
  }
  if (length > max_bytes) {
    return Status::IOError("reply larger than " + std::to_string(max_bytes) + " bytes");
  }
  try {
    value_.resize(length);
  } catch (const std::bad_alloc&) {
    return Status::IOError("out of memory for a " + std::to_string(length) + "-byte reply");
  }
  active_ = true;
  filled_ = 0;
  crlf_seen_ = 0;
  return i + 2;
}

Result<size_t> RedisLargeBulk::Take(const char* data, size_t n, std::optional<std::string>& done) {
  size_t body = std::min(n, value_.size() - filled_);
  std::memcpy(value_.data() + filled_, data, body);
  filled_ += body;
  size_t used = body;
  while (used < n && crlf_seen_ < 2) {
    if (data[used] != (crlf_seen_ == 0 ? '\r' : '\n')) {
      return Status::IOError("bulk string not followed by CRLF");
    }
    ++used;
    ++crlf_seen_;
  }
  if (crlf_seen_ == 2) {
    done = std::move(value_);
    value_ = std::string();
    active_ = false;
  }
  return used;
}

std::span<char> RedisLargeBulk::Target() {
  if (!active_) return {};
  return std::span<char>(value_.data() + filled_, value_.size() - filled_);
}

}  // namespace kvstore
