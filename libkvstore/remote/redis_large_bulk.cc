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
  value_ = std::string();
  length_ = length;
  filled_ = 0;
  crlf_seen_ = 0;
  KV_RETURN_IF_ERROR(Grow());
  active_ = true;
  return i + 2;
}

// The announced length is only a claim: the buffer follows the bytes that
// actually arrived (at most twice them, plus kFirstBytes), so a header alone
// cannot make us allocate. Doubling keeps the copies on growth below the
// value's size in total.
Status RedisLargeBulk::Grow() {
  if (filled_ < value_.size() || value_.size() == length_) return Status::OK();
  size_t size = std::min(length_, std::max(kFirstBytes, value_.size() * 2));
  try {
    value_.resize(size);
  } catch (const std::bad_alloc&) {
    return Status::IOError("out of memory for a " + std::to_string(length_) + "-byte reply");
  }
  return Status::OK();
}

Status RedisLargeBulk::Commit(size_t n) {
  filled_ += n;
  return Grow();
}

Result<size_t> RedisLargeBulk::Take(const char* data, size_t n, std::optional<std::string>& done) {
  size_t used = 0;
  while (used < n && filled_ < length_) {
    size_t body = std::min(n - used, value_.size() - filled_);
    std::memcpy(value_.data() + filled_, data + used, body);
    used += body;
    KV_RETURN_IF_ERROR(Commit(body));
  }
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
