#include "libkvstore/remote/redis_exchange.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <climits>
#include <cstring>

#include "libkvstore/util/posix_compat.h"

namespace kvstore {
namespace {

using Clock = std::chrono::steady_clock;

// Where one exchange stands in sending its pipeline.
struct SendState {
  std::vector<RedisPipeline::Piece> pieces;
  size_t piece = 0;   // first piece not fully sent
  size_t offset = 0;  // bytes of it already sent
  bool writable = true;
  bool done() const { return piece == pieces.size(); }
};

// Sends what the socket takes now. A closed peer is an error for this call,
// not a SIGPIPE for the process (SendMsgNoSigpipe).
Status SendSome(int fd, const std::string& node, SendState& s, RedisTraffic& traffic) {
  while (!s.done() && s.writable) {
    iovec iov[IOV_MAX];
    int n = 0;
    for (size_t p = s.piece; p < s.pieces.size() && n < IOV_MAX; ++p, ++n) {
      size_t skip = p == s.piece ? s.offset : 0;
      iov[n].iov_base = const_cast<char*>(s.pieces[p].data + skip);
      iov[n].iov_len = s.pieces[p].size - skip;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<decltype(msg.msg_iovlen)>(n);  // size_t on Linux, int on macOS
    ssize_t sent = SendMsgNoSigpipe(fd, &msg);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s.writable = false;
        break;
      }
      return Status::IOError("redis " + node + ": send: " + std::strerror(errno));
    }
    traffic.bytes_sent += static_cast<uint64_t>(sent);
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      size_t rest = s.pieces[s.piece].size - s.offset;
      size_t take = std::min(rest, left);
      s.offset += take;
      left -= take;
      if (s.offset == s.pieces[s.piece].size) {
        ++s.piece;
        s.offset = 0;
      }
    }
  }
  return Status::OK();
}

}  // namespace

void RedisPipeline::Add(std::span<const std::string_view> args) {
  auto append_inline = [this](std::string_view text) {
    if (segments_.empty() || segments_.back().external != nullptr) {
      segments_.push_back({nullptr, inline_.size(), 0});
    }
    inline_.append(text);
    segments_.back().size += text.size();
    bytes_ += text.size();
  };
  // "*<count>\r\n" or "$<length>\r\n"
  auto append_header = [&](char kind, size_t n) {
    char header[24] = {kind};
    char* end = std::to_chars(header + 1, header + sizeof(header) - 2, n).ptr;
    *end++ = '\r';
    *end++ = '\n';
    append_inline(std::string_view(header, static_cast<size_t>(end - header)));
  };
  append_header('*', args.size());
  for (std::string_view arg : args) {
    append_header('$', arg.size());
    if (arg.size() >= kReferenceBytes) {
      segments_.push_back({arg.data(), 0, arg.size()});
      bytes_ += arg.size();
    } else {
      append_inline(arg);
    }
    append_inline("\r\n");
  }
  ++commands_;
}

std::vector<RedisPipeline::Piece> RedisPipeline::Pieces() const {
  std::vector<Piece> out;
  out.reserve(segments_.size());
  for (const Segment& s : segments_) {
    out.push_back({s.external != nullptr ? s.external : inline_.data() + s.offset, s.size});
  }
  return out;
}

Clock::time_point RedisDeadline::When(Clock::time_point last_progress) const {
  Clock::time_point cap = start + timeout;
  if (bytes_per_second > 0) {
    double seconds = static_cast<double>(bytes_moved) / static_cast<double>(bytes_per_second);
    cap += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  return std::min(cap, last_progress + timeout);
}

std::chrono::milliseconds RedisDeadline::Remaining(Clock::time_point now) const {
  Clock::time_point when = When(now);
  if (when <= now) return std::chrono::milliseconds(0);
  return std::chrono::floor<std::chrono::milliseconds>(when - now);
}

void RunExchanges(std::span<RedisExchange*> exchanges, RedisDeadline& deadline,
                  RedisTraffic& traffic) {
  std::vector<SendState> send(exchanges.size());
  std::vector<bool> active(exchanges.size());
  for (size_t i = 0; i < exchanges.size(); ++i) {
    RedisExchange& e = *exchanges[i];
    e.replies.clear();
    e.status = Status::OK();
    e.timed_out = false;
    send[i].pieces = e.pipeline.Pieces();
    active[i] = !e.pipeline.empty();
  }
  auto fail = [&](size_t i, Status s) {
    exchanges[i]->status = std::move(s);
    active[i] = false;
  };

  Clock::time_point last_progress = Clock::now();
  auto progressed = [&](uint64_t bytes) {
    if (bytes == 0) return;
    deadline.bytes_moved += bytes;
    last_progress = Clock::now();
  };

  std::vector<pollfd> fds;
  std::vector<size_t> index;
  for (;;) {
    fds.clear();
    index.clear();
    for (size_t i = 0; i < exchanges.size(); ++i) {
      if (!active[i]) continue;
      RedisConnection* c = exchanges[i]->connection;
      uint64_t sent_before = traffic.bytes_sent;
      Status s = SendSome(c->fd(), c->node(), send[i], traffic);
      progressed(traffic.bytes_sent - sent_before);
      if (!s.ok()) {
        fail(i, s);
        continue;
      }
      short events = POLLIN | (send[i].done() ? 0 : POLLOUT);
      fds.push_back({c->fd(), events, 0});
      index.push_back(i);
    }
    if (fds.empty()) return;

    Clock::time_point now = Clock::now(), when = deadline.When(last_progress);
    if (now >= when) {
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - deadline.start);
      for (size_t i : index) {
        exchanges[i]->timed_out = true;
        fail(i, Status::IOError("redis " + exchanges[i]->connection->node() + ": timeout after " +
                                std::to_string(waited.count()) + " ms"));
      }
      return;
    }
    auto wait = std::chrono::ceil<std::chrono::milliseconds>(when - now).count();
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(wait, INT_MAX)));
    if (rc < 0 && errno != EINTR) {
      Status s = Status::IOError(std::string("redis: poll: ") + std::strerror(errno));
      for (size_t i : index) fail(i, s);
      return;
    }
    for (size_t k = 0; rc > 0 && k < fds.size(); ++k) {
      size_t i = index[k];
      RedisExchange& e = *exchanges[i];
      if (fds[k].revents & POLLOUT) send[i].writable = true;
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Result<size_t> got = e.connection->ReadAvailable(e.replies);
      if (!got.ok()) {
        fail(i, got.status());
        continue;
      }
      traffic.bytes_received += *got;
      progressed(*got);
      if (e.replies.size() > e.pipeline.commands()) {
        fail(i, Status::IOError("redis " + e.connection->node() + ": protocol error: " +
                                "more replies than commands"));
      } else if (e.replies.size() == e.pipeline.commands() && e.connection->MidReply()) {
        fail(i, Status::IOError("redis " + e.connection->node() + ": protocol error: " +
                                "bytes after the last reply"));
      } else if (e.replies.size() == e.pipeline.commands() && send[i].done()) {
        active[i] = false;
      }
    }
  }
}

}  // namespace kvstore
