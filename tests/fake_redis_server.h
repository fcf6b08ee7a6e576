// FakeRedisServer: a scripted Redis server on a loopback port, for tests
// of the client against servers that lie, stall or close (one thread; a
// responder that sleeps stalls every client of that server).
#ifndef KVSTORE_TESTS_FAKE_REDIS_SERVER_H_
#define KVSTORE_TESTS_FAKE_REDIS_SERVER_H_

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/redis_backend.h"
#include "libkvstore/util/posix_compat.h"
#include "testutil.h"

namespace kvstore::testing {

// Answers each command with the bytes `respond` returns for it; kClose
// closes the connection instead (after the bytes before it, if any),
// kSilence sends nothing.
class FakeRedisServer {
 public:
  using Responder = std::function<std::string(const std::vector<std::string>& command)>;
  static inline const std::string kClose = "<close>";
  static inline const std::string kSilence = "<silence>";

  explicit FakeRedisServer(Responder respond) : respond_(std::move(respond)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeRedisServer() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  uint16_t port() const { return port_; }

 private:
  struct Client {
    int fd;
    std::string in;
  };

  // Takes one complete "*N $len arg ..." command off the front of `in`.
  static bool TakeCommand(std::string& in, std::vector<std::string>& out) {
    size_t pos = 0;
    auto line = [&](char kind, long& value) {
      size_t end = in.find("\r\n", pos);
      if (end == std::string::npos || in[pos] != kind) return false;
      value = std::stol(in.substr(pos + 1, end - pos - 1));
      pos = end + 2;
      return true;
    };
    long n = 0;
    if (in.empty() || !line('*', n)) return false;
    out.clear();
    for (long i = 0; i < n; ++i) {
      long size = 0;
      if (pos >= in.size() || !line('$', size) || in.size() < pos + size + 2) return false;
      out.push_back(in.substr(pos, size));
      pos += size + 2;
    }
    in.erase(0, pos);
    return true;
  }

  void Loop() {
    std::vector<Client> clients;
    while (!stop_) {
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (const Client& c : clients) fds.push_back({c.fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int fd = accept(listen_fd_, nullptr, nullptr);
        if (fd >= 0) (void)SuppressSigpipe(fd);
        clients.push_back({fd, ""});
      }
      for (size_t k = 1; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        Client& c = clients[k - 1];
        char buf[65536];
        ssize_t n = read(c.fd, buf, sizeof(buf));
        bool open = n > 0;
        if (open) c.in.append(buf, static_cast<size_t>(n));
        std::vector<std::string> command;
        while (open && TakeCommand(c.in, command)) {
          std::string reply = respond_(command);
          if (reply.ends_with(kClose)) {
            open = false;
            reply.resize(reply.size() - kClose.size());
          }
          if (reply == kSilence) continue;
          for (size_t sent = 0; sent < reply.size();) {
            iovec part{reply.data() + sent, reply.size() - sent};
            msghdr msg{};
            msg.msg_iov = &part;
            msg.msg_iovlen = 1;
            ssize_t w = SendMsgNoSigpipe(c.fd, &msg);  // a client that left is no SIGPIPE
            if (w <= 0) break;
            sent += static_cast<size_t>(w);
          }
        }
        if (!open) {
          close(c.fd);
          c.fd = -1;
        }
      }
      std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
    }
    for (const Client& c : clients) close(c.fd);
  }

  Responder respond_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

inline const std::string kNotCluster = "-ERR This instance has cluster support disabled\r\n";

// Options for a test against `server`: short timeouts and backoff, 1 MiB replies.
inline RedisOptions Options(const FakeRedisServer& server) {
  return RedisOptions{.url = server.url(), .connect_timeout = std::chrono::milliseconds(500),
                      .command_timeout = std::chrono::milliseconds(200),
                      .backoff_initial = std::chrono::milliseconds(10),
                      .backoff_max = std::chrono::milliseconds(10), .max_reply_bytes = 1 << 20};
}

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_FAKE_REDIS_SERVER_H_
