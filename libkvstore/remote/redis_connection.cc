// The hiredis wrapper. hiredis connects (name resolution, a non-blocking
// connect bounded by the timeout, TCP_NODELAY) and parses replies; its reader
// builds our RedisReply objects directly, so a bulk value is copied once from
// the reader's buffer into the std::string the caller gets.
#include "libkvstore/remote/redis_connection.h"

#include <fcntl.h>
#include <poll.h>
#include <hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <optional>

#include "libkvstore/remote/redis_large_bulk.h"
#include "libkvstore/util/posix_compat.h"

namespace kvstore {
namespace {

constexpr size_t kReadBufferBytes = 256 << 10;
// Objects one reply may hold. Our largest legitimate replies (CLUSTER SLOTS,
// a SCAN page) have a few thousand; a hostile array header cannot make us
// allocate beyond this.
constexpr size_t kMaxReplyObjects = 1 << 20;
// What an array reserves up front; it grows as its elements arrive.
constexpr size_t kFirstElements = 1024;

}  // namespace

// Builds RedisReply trees from hiredis's reader callbacks. The reader owns a
// root object until it hands it out; children live inside their parent's
// `elements`, so freeing the root frees the tree.
class RedisReplyParser {
 public:
  explicit RedisReplyParser(size_t max_reply_bytes) : max_reply_bytes_(max_reply_bytes) {
    static redisReplyObjectFunctions functions = {CreateString, CreateArray, CreateInteger,
                                                  CreateNil, FreeObject};
    reader_ = redisReaderCreateWithFunctions(&functions);
    if (reader_ != nullptr) reader_->privdata = this;
  }
  ~RedisReplyParser() {
    if (reader_ != nullptr) redisReaderFree(reader_);
  }

  // Feeds `n` bytes and appends each reply they complete to `out`. A large
  // bulk string that starts at a reply boundary goes to large_bulk_.
  Status Feed(const char* data, size_t n, std::vector<RedisReply>& out, std::string_view node) {
    while (n > 0) {
      if (!large_bulk_.active() && bytes_since_reply_ == 0) {
        Result<size_t> header = large_bulk_.Start(data, n, max_reply_bytes_);
        if (!header.ok()) return Fail(node, header.status().message());
        data += *header;
        n -= *header;
      }
      if (!large_bulk_.active()) return FeedHiredis(data, n, out, node);
      std::optional<std::string> done;
      Result<size_t> used = large_bulk_.Take(data, n, done);
      if (!used.ok()) return Fail(node, used.status().message());
      data += *used;
      n -= *used;
      if (done) {
        out.emplace_back();
        out.back().type = RedisReply::Type::kString;
        out.back().str = std::move(*done);
      }
    }
    return Status::OK();
  }

  // Where socket bytes can go directly (see RedisLargeBulk::Target).
  std::span<char> DirectTarget() { return large_bulk_.Target(); }
  Status CommitDirect(size_t n, std::string_view node) {
    Status s = large_bulk_.Commit(n);
    return s.ok() ? s : Fail(node, s.message());
  }

  // True when fed bytes end inside a reply.
  bool mid_reply() const { return bytes_since_reply_ > 0 || large_bulk_.active(); }

 private:
  Status FeedHiredis(const char* data, size_t n, std::vector<RedisReply>& out, std::string_view node) {
    if (reader_ == nullptr) return Fail(node, "out of memory");
    if (redisReaderFeed(reader_, data, n) != REDIS_OK) return Fail(node, reader_->errstr);
    bytes_since_reply_ += n;
    for (;;) {
      void* object = nullptr;
      if (redisReaderGetReply(reader_, &object) != REDIS_OK) {
        return Fail(node, limit_error_.empty() ? std::string(reader_->errstr) : limit_error_);
      }
      if (object == nullptr) break;
      std::unique_ptr<RedisReply> reply(static_cast<RedisReply*>(object));
      out.push_back(std::move(*reply));
      objects_ = 0;
      bytes_since_reply_ = reader_->len - reader_->pos;
    }
    if (bytes_since_reply_ > max_reply_bytes_) {
      return Fail(node, "reply larger than " + std::to_string(max_reply_bytes_) + " bytes");
    }
    return Status::OK();
  }

  static Status Fail(std::string_view node, std::string_view what) {
    return Status::IOError("redis " + std::string(node) + ": protocol error: " + std::string(what));
  }

  static RedisReplyParser* ParserOf(const redisReadTask* task) {
    return static_cast<RedisReplyParser*>(task->privdata);
  }

  static RedisReply* OverLimit(const redisReadTask* task) {
    ParserOf(task)->limit_error_ =
        "reply has more than " + std::to_string(kMaxReplyObjects) + " elements";
    return nullptr;
  }

  // The object for `task`: a new root, or the next element of its parent
  // array. nullptr (which the reader reports as an error) past the object
  // limit. Objects count, and are allocated, as they arrive: an array header
  // alone ("*1048575") costs nothing.
  static RedisReply* Place(const redisReadTask* task) {
    RedisReplyParser* parser = ParserOf(task);
    if (parser->objects_ + 1 > kMaxReplyObjects) return OverLimit(task);
    ++parser->objects_;
    if (task->parent == nullptr) return new (std::nothrow) RedisReply;
    // hiredis fills an array's elements in order, each one complete before
    // the next starts, so appending never moves an element still in use.
    auto* parent = static_cast<RedisReply*>(task->parent->obj);
    if (task->idx < 0 || static_cast<size_t>(task->idx) != parent->elements.size()) return nullptr;
    return &parent->elements.emplace_back();
  }

  static void* CreateString(const redisReadTask* task, char* str, size_t len) {
    try {
      RedisReply* r = Place(task);
      if (r == nullptr) return nullptr;
      r->type = task->type == REDIS_REPLY_ERROR    ? RedisReply::Type::kError
                : task->type == REDIS_REPLY_STATUS ? RedisReply::Type::kStatus
                                                   : RedisReply::Type::kString;
      r->str.assign(str, len);
      return r;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  static void* CreateArray(const redisReadTask* task, int elements) {
    try {
      auto count = static_cast<size_t>(elements);
      if (count > kMaxReplyObjects) return OverLimit(task);
      RedisReply* r = Place(task);
      if (r == nullptr) return nullptr;
      r->type = RedisReply::Type::kArray;
      r->elements.reserve(std::min(count, kFirstElements));
      return r;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  static void* CreateInteger(const redisReadTask* task, long long value) {
    try {
      RedisReply* r = Place(task);
      if (r == nullptr) return nullptr;
      r->type = RedisReply::Type::kInteger;
      r->integer = value;
      return r;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  static void* CreateNil(const redisReadTask* task) {
    try {
      RedisReply* r = Place(task);
      if (r != nullptr) r->type = RedisReply::Type::kNil;
      return r;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  // hiredis frees only root objects (on errors and in redisReaderFree).
  static void FreeObject(void* object) { delete static_cast<RedisReply*>(object); }

  redisReader* reader_ = nullptr;
  RedisLargeBulk large_bulk_;
  size_t max_reply_bytes_;
  size_t bytes_since_reply_ = 0;  // fed since the last complete reply
  size_t objects_ = 0;  // in the reply being parsed
  std::string limit_error_;
};

RedisConnection::RedisConnection(void* context, std::string node, size_t max_reply_bytes)
    : context_(context),
      fd_(static_cast<redisContext*>(context)->fd),
      node_(std::move(node)),
      parser_(std::make_unique<RedisReplyParser>(max_reply_bytes)),
      buffer_(kReadBufferBytes) {}

RedisConnection::~RedisConnection() { redisFree(static_cast<redisContext*>(context_)); }

Result<std::unique_ptr<RedisConnection>> RedisConnection::Connect(const std::string& host,
                                                                  uint16_t port,
                                                                  std::chrono::milliseconds timeout,
                                                                  size_t max_reply_bytes,
                                                                  bool& timed_out) {
  timed_out = false;
  std::string node = RedisNodeName(host, port);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  if (c == nullptr) return Status::IOError("redis " + node + ": connect: out of memory");
  if (c->err != 0) {
    std::string why = c->errstr;
    timed_out = why == std::strerror(ETIMEDOUT);  // hiredis's message when its poll() expires
    redisFree(c);
    return Status::IOError("redis " + node + ": connect: " + why);
  }
  redisEnableKeepAlive(c);
  int flags = fcntl(c->fd, F_GETFL);
  if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    std::string why = std::strerror(errno);
    redisFree(c);
    return Status::IOError("redis " + node + ": fcntl: " + why);
  }
  if (SuppressSigpipe(c->fd) != 0) {  // for the exchange's sends
    std::string why = std::strerror(errno);
    redisFree(c);
    return Status::IOError("redis " + node + ": setsockopt SO_NOSIGPIPE: " + why);
  }
  return std::unique_ptr<RedisConnection>(new RedisConnection(c, std::move(node), max_reply_bytes));
}

Result<size_t> RedisConnection::ReadAvailable(std::vector<RedisReply>& out) {
  size_t total = 0;
  for (;;) {
    // The body of a large value is read straight into its string.
    std::span<char> target = parser_->DirectTarget();
    if (target.empty()) target = buffer_;
    ssize_t n = ::read(fd_, target.data(), target.size());
    if (n > 0) {
      total += static_cast<size_t>(n);
      if (target.data() == buffer_.data()) {
        KV_RETURN_IF_ERROR(parser_->Feed(buffer_.data(), static_cast<size_t>(n), out, node_));
      } else {
        KV_RETURN_IF_ERROR(parser_->CommitDirect(static_cast<size_t>(n), node_));
      }
      if (static_cast<size_t>(n) < target.size()) return total;  // drained
      continue;
    }
    if (n == 0) return Status::IOError("redis " + node_ + ": connection closed by the server");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return total;
    return Status::IOError("redis " + node_ + ": read: " + std::strerror(errno));
  }
}

bool RedisConnection::MidReply() const { return parser_->mid_reply(); }

bool RedisConnection::IdleAndOpen() const {
  if (MidReply()) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

Result<std::vector<RedisReply>> ParseRedisReplies(std::string_view bytes, size_t max_reply_bytes) {
  RedisReplyParser parser(max_reply_bytes);
  std::vector<RedisReply> out;
  if (!bytes.empty()) KV_RETURN_IF_ERROR(parser.Feed(bytes.data(), bytes.size(), out, "input"));
  if (parser.mid_reply()) return Status::IOError("redis input: the bytes end inside a reply");
  return out;
}

}  // namespace kvstore
