// The Redis backend against a fake server that lies: garbage, wrong types,
// huge lengths, endless redirections, replies cut short. Every case is an
// error Status (never a crash, a hang or a huge allocation), and the backend
// recovers once the server behaves.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <latch>
#include <thread>

#include "kvstore/redis_backend.h"
#include "largest_allocation.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

using std::chrono::milliseconds;

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
      if (fds[0].revents & POLLIN) clients.push_back({accept(listen_fd_, nullptr, nullptr), ""});
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
            ssize_t w = send(c.fd, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
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

const std::string kNotCluster = "-ERR This instance has cluster support disabled\r\n";

RedisOptions Options(const FakeRedisServer& server) {
  return RedisOptions{.url = server.url(), .connect_timeout = milliseconds(500),
                      .command_timeout = milliseconds(200), .backoff_initial = milliseconds(10),
                      .backoff_max = milliseconds(10), .max_reply_bytes = 1 << 20};
}

// A server whose first GET gets `bad` and every later GET a good value.
struct OneBadGet {
  explicit OneBadGet(std::string bad)
      : server([this, bad](const std::vector<std::string>& c) -> std::string {
          if (c[0] == "CLUSTER") return kNotCluster;
          return gets++ == 0 ? bad : "$2\r\nok\r\n";
        }) {}
  std::atomic<int> gets{0};
  FakeRedisServer server;
};

void ExpectErrorThenRecovery(const std::string& bad, StatusCode code, const char* message) {
  OneBadGet fake(bad);
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(Options(fake.server)));
  std::vector<std::string> keys = {"k"};
  auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(backend->Get(keys), HasCode(code, message)) << bad.substr(0, 40);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  std::this_thread::sleep_for(milliseconds(30));  // past the backoff window
  ASSERT_OK_AND_ASSIGN(auto values, backend->Get(keys));
  EXPECT_EQ(values[0], "ok");
}

TEST(RedisHostileServer, GarbageIsAProtocolError) {
  ExpectErrorThenRecovery("hello\r\n", StatusCode::kIOError, "protocol error");
}
TEST(RedisHostileServer, WrongReplyTypeIsAnError) {
  ExpectErrorThenRecovery(":1\r\n", StatusCode::kIOError, "GET 'k': unexpected integer reply");
}
TEST(RedisHostileServer, HugeBulkLengthIsRefusedBeforeAllocating) {
  ExpectErrorThenRecovery("$99999999999\r\n", StatusCode::kIOError, "reply larger than 1048576 bytes");
}
// Under the default max_reply_bytes, a server that announces a huge value
// and then closes or stalls gets an error, and the client has allocated
// for the bytes that came, not for the announced length.
TEST(RedisHostileServer, AnnouncedValueThatNeverComesAllocatesLittle) {
  const size_t announced = RedisOptions{}.max_reply_bytes;
  const std::string header = "$" + std::to_string(announced) + "\r\n" + std::string(1000, 'v');
  for (const auto& [tail, message] : {std::pair{FakeRedisServer::kClose, "connection closed"},
                                      std::pair{FakeRedisServer::kSilence, "timeout after"}}) {
    FakeRedisServer server([&](const std::vector<std::string>& c) -> std::string {
      if (c[0] == "CLUSTER") return kNotCluster;
      return tail == FakeRedisServer::kClose ? header + tail : header;
    });
    RedisOptions o = Options(server);
    o.max_reply_bytes = announced;
    ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(o));
    LargestAllocation largest;
    EXPECT_THAT(backend->Get(std::vector<std::string>{"k"}), HasCode(StatusCode::kIOError, message));
    EXPECT_LE(largest.bytes(), size_t{2} << 20) << message;
  }
}

TEST(RedisHostileServer, ValueThatNeverArrivesTimesOut) {
  ExpectErrorThenRecovery("$900000\r\nabc", StatusCode::kIOError, "timeout after");  // large value
  ExpectErrorThenRecovery("$1000\r\nabc", StatusCode::kIOError, "timeout after");    // small value
}
TEST(RedisHostileServer, LargeValueWithoutItsCrlfIsAProtocolError) {
  ExpectErrorThenRecovery("$70000\r\n" + std::string(70000, 'v') + "XY", StatusCode::kIOError,
                          "not followed by CRLF");
}
TEST(RedisHostileServer, OversizedReplyIsRefused) {
  ExpectErrorThenRecovery("$5000000\r\n" + std::string(5000000, 'x') + "\r\n", StatusCode::kIOError,
                          "reply larger than 1048576 bytes");
}
TEST(RedisHostileServer, HugeArrayIsRefused) {
  ExpectErrorThenRecovery("*2000000\r\n", StatusCode::kIOError, "more than 1048576 elements");
}
TEST(RedisHostileServer, ConnectionClosedMidReply) {
  ExpectErrorThenRecovery(FakeRedisServer::kClose, StatusCode::kIOError,
                          "connection closed by the server");
}
TEST(RedisHostileServer, ExtraRepliesAreAProtocolError) {
  ExpectErrorThenRecovery("$1\r\nx\r\n$1\r\ny\r\n", StatusCode::kIOError, "more replies than commands");
}

// Part of an extra reply read with the last expected one must not survive
// into the next call, where it would prefix that call's reply.
TEST(RedisHostileServer, PartialExtraReplyIsAProtocolError) {
  ExpectErrorThenRecovery("$1\r\nx\r\n$1\r\ny", StatusCode::kIOError, "bytes after the last reply");
  ExpectErrorThenRecovery("$1\r\nx\r\n$70000\r\ny", StatusCode::kIOError,
                          "bytes after the last reply");
}

TEST(RedisHostileServer, BadClusterSlotsFailsOpen) {
  FakeRedisServer server([](const std::vector<std::string>&) -> std::string {
    return "*1\r\n*3\r\n:9000\r\n:8000\r\n*2\r\n$1\r\nh\r\n:1\r\n";
  });
  EXPECT_THAT(OpenRedisBackend(Options(server)), HasCode(StatusCode::kCorruption, "9000..8000"));
}

TEST(RedisHostileServer, EndlessMovedGivesUp) {
  uint16_t port = 0;
  FakeRedisServer server([&port](const std::vector<std::string>& c) -> std::string {
    std::string self = "127.0.0.1:" + std::to_string(port);
    if (c[0] == "CLUSTER") {
      return "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(port) + "\r\n";
    }
    return "-MOVED 12182 " + self + "\r\n";
  });
  port = server.port();
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(Options(server)));
  EXPECT_THAT(backend->Get(std::vector<std::string>{"foo"}),
              HasCode(StatusCode::kIOError, "still redirected after 5 redirections"));
  EXPECT_EQ(backend->Stats().moved, 6u);
  EXPECT_EQ(backend->Describe(), "redis cluster 127.0.0.1:" + std::to_string(port) + " (1 masters)");
}

// "*1\r\n" CLUSTER SLOTS reply: every slot served by 127.0.0.1:port.
std::string AllSlotsOn(uint16_t port) {
  return "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(port) + "\r\n";
}

// A node that counts the AUTH commands it gets and answers GET with "ok".
struct CountingNode {
  CountingNode()
      : server([this](const std::vector<std::string>& c) -> std::string {
          if (c[0] != "AUTH") return "$2\r\nok\r\n";
          ++auths;
          return "+OK\r\n";
        }) {}
  std::atomic<int> auths{0};
  FakeRedisServer server;
};

// A redirection to a node that CLUSTER SLOTS does not list is refused, even
// after a reload: the client never connects there, so never sends it AUTH.
TEST(RedisHostileServer, RedirectToAnUnlistedNodeIsRefused) {
  CountingNode elsewhere;
  for (const char* kind : {"MOVED", "ASK"}) {
    uint16_t port = 0;
    FakeRedisServer server([&](const std::vector<std::string>& c) -> std::string {
      if (c[0] == "AUTH") return "+OK\r\n";
      if (c[0] == "CLUSTER") return AllSlotsOn(port);
      return std::string("-") + kind + " 12182 127.0.0.1:" + std::to_string(elsewhere.server.port()) + "\r\n";
    });
    port = server.port();
    RedisOptions o = Options(server);
    o.url = "redis://u:secret@127.0.0.1:" + std::to_string(port);
    ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(o));
    std::this_thread::sleep_for(milliseconds(20));  // the reload's rate limit
    EXPECT_THAT(backend->Get(std::vector<std::string>{"foo"}),
                HasCode(StatusCode::kIOError, "a node that CLUSTER SLOTS does not list"));
    EXPECT_EQ(backend->Stats().slot_map_loads, 2u) << kind;  // Open, then the reload
    EXPECT_EQ(elsewhere.auths, 0) << kind;
  }
}

// A redirection to a node that a reloaded slot map lists is followed.
TEST(RedisHostileServer, RedirectToANewlyListedNodeIsFollowed) {
  CountingNode target;
  uint16_t port = 0;
  std::atomic<bool> moved{false};
  FakeRedisServer server([&](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "AUTH") return "+OK\r\n";
    if (c[0] == "CLUSTER") return AllSlotsOn(moved ? target.server.port() : port);
    moved = true;
    return "-MOVED 12182 127.0.0.1:" + std::to_string(target.server.port()) + "\r\n";
  });
  port = server.port();
  RedisOptions o = Options(server);
  o.url = "redis://u:secret@127.0.0.1:" + std::to_string(port);
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(o));
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_OK_AND_ASSIGN(auto values, backend->Get(std::vector<std::string>{"foo"}));
  EXPECT_EQ(values[0], "ok");
  EXPECT_EQ(target.auths, 1);
}

// CLUSTER SLOTS: slots 0..16382 on 127.0.0.1:a, and 16383 on :b when b != 0.
std::string SlotsOn(uint16_t a, uint16_t b) {
  auto range = [](int first, int last, uint16_t port) {
    return "*3\r\n:" + std::to_string(first) + "\r\n:" + std::to_string(last) +
           "\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(port) + "\r\n";
  };
  return b == 0 ? "*1\r\n" + range(0, 16383, a) : "*2\r\n" + range(0, 16382, a) + range(16383, 16383, b);
}

// Work a call does after its first round (a slot map reload, a new
// connection's AUTH) runs on what is left of the call's deadline: 400 ms
// on the first node, then 400 ms more of it, end at command_timeout.
constexpr milliseconds kSlowStep(400);
RedisOptions SlowClusterOptions(const FakeRedisServer& seed) {
  RedisOptions o = Options(seed);
  o.url = "redis://u:secret@127.0.0.1:" + std::to_string(seed.port());
  o.command_timeout = milliseconds(500);
  return o;
}

TEST(RedisHostileServer, SlotMapReloadStaysWithinTheCallsDeadline) {
  CountingNode b;
  uint16_t port = 0;
  std::atomic<int> slot_loads{0};
  FakeRedisServer a([&](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "AUTH") return "+OK\r\n";
    if (c[0] == "CLUSTER") {
      if (slot_loads++ < 2) return SlotsOn(port, 0);  // Open: the probe and the load
      std::this_thread::sleep_for(kSlowStep);
      return SlotsOn(port, b.server.port());
    }
    std::this_thread::sleep_for(kSlowStep);
    return "-MOVED 12182 127.0.0.1:" + std::to_string(b.server.port()) + "\r\n";
  });
  port = a.port();
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(SlowClusterOptions(a)));
  std::this_thread::sleep_for(milliseconds(20));  // the reload's rate limit
  auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(backend->Get(std::vector<std::string>{"foo"}),
              HasCode(StatusCode::kIOError, "a node that CLUSTER SLOTS does not list"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(700));
  EXPECT_EQ(b.auths, 0);
}

TEST(RedisHostileServer, NewConnectionsAuthWithinTheCallsDeadline) {
  uint16_t port = 0;
  FakeRedisServer b([&](const std::vector<std::string>& c) -> std::string {
    if (c[0] != "AUTH") return "$2\r\nok\r\n";
    std::this_thread::sleep_for(kSlowStep);
    return "+OK\r\n";
  });
  FakeRedisServer a([&](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "AUTH") return "+OK\r\n";
    if (c[0] == "CLUSTER") return SlotsOn(port, b.port());
    std::this_thread::sleep_for(kSlowStep);
    return "-MOVED 12182 127.0.0.1:" + std::to_string(b.port()) + "\r\n";
  });
  port = a.port();
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(SlowClusterOptions(a)));
  auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(backend->Get(std::vector<std::string>{"foo"}), HasCode(StatusCode::kIOError, "timeout"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(700));
}

TEST(RedisHostileServer, TooManyMastersFailOpen) {
  std::string slots = "*1001\r\n";
  for (int i = 0; i <= 1000; ++i) {
    slots += "*3\r\n:" + std::to_string(i) + "\r\n:" + std::to_string(i) +
             "\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(i + 1) + "\r\n";
  }
  FakeRedisServer server([&](const std::vector<std::string>&) -> std::string { return slots; });
  EXPECT_THAT(OpenRedisBackend(Options(server)), HasCode(StatusCode::kCorruption, "more than 1000 masters"));
}

// When a node's backoff window ends, one call reconnects while the others
// keep failing fast, instead of all of them connecting at once.
TEST(RedisHostileServer, OneCallReconnectsAfterTheBackoffWindow) {
  std::atomic<int> auths{0}, gets{0};
  FakeRedisServer server([&](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "CLUSTER") return kNotCluster;
    if (c[0] == "AUTH") {
      ++auths;
      std::this_thread::sleep_for(milliseconds(100));  // a slow reconnect
      return "+OK\r\n";
    }
    return gets++ == 0 ? FakeRedisServer::kClose : "$2\r\nok\r\n";
  });
  RedisOptions o = Options(server);
  o.url = "redis://u:secret@127.0.0.1:" + std::to_string(server.port());
  o.command_timeout = milliseconds(1000);
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(o));
  std::vector<std::string> keys = {"k"};
  EXPECT_THAT(backend->Get(keys), HasCode(StatusCode::kIOError, "closed"));  // opens the window
  std::this_thread::sleep_for(milliseconds(30));
  const int auths_before = auths;
  const uint64_t fast_before = backend->Stats().fast_failures;

  constexpr int kCallers = 8;
  std::latch start(kCallers);
  std::atomic<int> succeeded{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&] {
      start.arrive_and_wait();
      auto got = backend->Get(keys);
      if (got.ok()) {
        ++succeeded;
      } else {
        EXPECT_THAT(got, HasCode(StatusCode::kIOError, "while another call reconnects"));
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(auths - auths_before, 1);
  EXPECT_EQ(succeeded, 1);
  EXPECT_EQ(backend->Stats().fast_failures - fast_before, uint64_t{kCallers - 1});
  ASSERT_OK_AND_ASSIGN(auto values, backend->Get(keys));  // the window is closed for all
  EXPECT_EQ(values[0], "ok");
}

TEST(RedisHostileServer, RefusedPasswordIsFailedPrecondition) {
  FakeRedisServer server([](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "AUTH") return "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    return kNotCluster;
  });
  RedisOptions o = Options(server);
  o.url = "redis://u:secret@127.0.0.1:" + std::to_string(server.port());
  auto opened = OpenRedisBackend(o);
  EXPECT_THAT(opened, HasCode(StatusCode::kFailedPrecondition, "AUTH u: WRONGPASS"));
  EXPECT_EQ(opened.status().message().find("secret"), std::string_view::npos);
}

TEST(RedisHostileServer, ScanThatNeverEndsOrStraysIsAnError) {
  FakeRedisServer stuck([](const std::vector<std::string>& c) -> std::string {
    return c[0] == "SCAN" ? "*2\r\n$1\r\n7\r\n*0\r\n" : kNotCluster;
  });
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(Options(stuck)));
  EXPECT_THAT(backend->Scan("p:", 10), HasCode(StatusCode::kIOError, "cursor did not advance"));
  FakeRedisServer stray([](const std::vector<std::string>& c) -> std::string {
    return c[0] == "SCAN" ? "*2\r\n$1\r\n0\r\n*1\r\n$5\r\nother\r\n" : kNotCluster;
  });
  ASSERT_OK_AND_ASSIGN(backend, OpenRedisBackend(Options(stray)));
  EXPECT_THAT(backend->Scan("p:", 10), HasCode(StatusCode::kIOError, "outside the prefix"));
}

TEST(RedisHostileServer, GetRangeLongerThanAskedIsAnError) {
  FakeRedisServer server([](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "CLUSTER") return kNotCluster;
    if (c[0] == "MULTI") return "+OK\r\n";
    if (c[0] == "EXEC") return "*2\r\n:1\r\n$10\r\n0123456789\r\n";
    return "+QUEUED\r\n";
  });
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(Options(server)));
  EXPECT_THAT(backend->GetRange("k", 0, 3), HasCode(StatusCode::kIOError, "more bytes than asked"));
}

}  // namespace
}  // namespace kvstore::testing
