// The Redis client against fake cluster nodes that lie or stall: endless or
// foreign redirections, oversized slot maps, slow reloads and AUTH, and a
// node coming back after its backoff window.
#include <atomic>
#include <chrono>
#include <latch>
#include <thread>

#include "fake_redis_server.h"

namespace kvstore::testing {
namespace {

using std::chrono::milliseconds;

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
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));  // 1202 ms before the fix
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
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));  // 1202 ms before the fix
}

// Opening is no request: its first connection's AUTH and its CLUSTER SLOTS
// have a deadline each, so a slow server still opens.
TEST(RedisHostileServer, OpenGivesAuthAndClusterSlotsADeadlineEach) {
  uint16_t port = 0;
  FakeRedisServer a([&](const std::vector<std::string>& c) -> std::string {
    std::this_thread::sleep_for(kSlowStep);
    return c[0] == "AUTH" ? "+OK\r\n" : SlotsOn(port, 0);
  });
  port = a.port();
  EXPECT_OK(OpenRedisBackend(SlowClusterOptions(a)));
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
  std::atomic<bool> release_auth{true};  // held only for the callers below
  FakeRedisServer server([&](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "CLUSTER") return kNotCluster;
    if (c[0] == "AUTH") {
      ++auths;
      // A slow reconnect, held until every other caller has failed fast
      // (or 1.5 s), so a loaded machine cannot let a caller arrive late.
      const auto until = std::chrono::steady_clock::now() + milliseconds(1500);
      while (!release_auth && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      return "+OK\r\n";
    }
    return gets++ == 0 ? FakeRedisServer::kClose : "$2\r\nok\r\n";
  });
  RedisOptions o = Options(server);
  o.url = "redis://u:secret@127.0.0.1:" + std::to_string(server.port());
  o.command_timeout = milliseconds(3000);
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(o));
  std::vector<std::string> keys = {"k"};
  EXPECT_THAT(backend->Get(keys), HasCode(StatusCode::kIOError, "closed"));  // opens the window
  std::this_thread::sleep_for(milliseconds(30));
  const int auths_before = auths;
  const uint64_t fast_before = backend->Stats().fast_failures;
  release_auth = false;

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
  const auto give_up = std::chrono::steady_clock::now() + milliseconds(1500);
  while (backend->Stats().fast_failures - fast_before < uint64_t{kCallers - 1} &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  release_auth = true;
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(auths - auths_before, 1);
  EXPECT_EQ(succeeded, 1);
  EXPECT_EQ(backend->Stats().fast_failures - fast_before, uint64_t{kCallers - 1});
  ASSERT_OK_AND_ASSIGN(auto values, backend->Get(keys));  // the window is closed for all
  EXPECT_EQ(values[0], "ok");
}

}  // namespace
}  // namespace kvstore::testing
