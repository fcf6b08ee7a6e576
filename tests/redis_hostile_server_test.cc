// The Redis backend against a fake server that lies: garbage, wrong types,
// huge lengths, endless redirections, replies cut short. Every case is an
// error Status (never a crash, a hang or a huge allocation), and the backend
// recovers once the server behaves.
#include <atomic>
#include <chrono>
#include <thread>

#include "fake_redis_server.h"
#include "largest_allocation.h"

namespace kvstore::testing {
namespace {

using std::chrono::milliseconds;


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
  std::string header(1, '$');  // appends only: "$" + std::string trips GCC 12's -Wrestrict at -O3
  header += std::to_string(announced) + "\r\n" + std::string(1000, 'v');
  for (const auto& [tail, message] : {std::pair{FakeRedisServer::kClose, "connection closed"},
                                      std::pair{FakeRedisServer::kSilence, "timeout after"}}) {
    // The header and 1000 body bytes, then the close, or nothing more.
    const std::string reply = tail == FakeRedisServer::kClose ? header + tail : header;
    FakeRedisServer server([&reply](const std::vector<std::string>& c) -> std::string {
      return c[0] == "CLUSTER" ? kNotCluster : reply;
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

// A refused login is PermissionDenied naming the user and the node, never
// the password: at AUTH (a wrong password), and at CLUSTER SLOTS, the
// first command, when the URL gives no password (NOAUTH). An ACL that
// forbids CLUSTER SLOTS says which permission to grant.
TEST(RedisHostileServer, RefusedLoginIsPermissionDenied) {
  FakeRedisServer server([](const std::vector<std::string>& c) -> std::string {
    if (c[0] == "AUTH") return "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    return kNotCluster;
  });
  RedisOptions o = Options(server);
  const std::string node = "127.0.0.1:" + std::to_string(server.port());
  o.url = "redis://u:secret@" + node;
  auto opened = OpenRedisBackend(o);
  EXPECT_THAT(opened, HasCode(StatusCode::kPermissionDenied,
                              "redis: authentication failed for user u at " + node + ": WRONGPASS invalid"));
  EXPECT_EQ(opened.status().message().find("secret"), std::string_view::npos);
  o.url = "redis://:secret@" + node;
  EXPECT_THAT(OpenRedisBackend(o), HasCode(StatusCode::kPermissionDenied, "for user default at " + node));

  FakeRedisServer needs_password([](const std::vector<std::string>& c) -> std::string {
    return c[0] == "CLUSTER" ? "-NOAUTH Authentication required.\r\n" : "+OK\r\n";
  });
  o = Options(needs_password);
  EXPECT_THAT(OpenRedisBackend(o),
              HasCode(StatusCode::kPermissionDenied, "authentication failed for user default at 127.0.0.1:" +
                                                         std::to_string(needs_password.port()) +
                                                         ": NOAUTH Authentication required. (the URL gives no "
                                                         "password"));
  FakeRedisServer no_slots([](const std::vector<std::string>& c) -> std::string {
    return c[0] == "CLUSTER" ? "-NOPERM this user has no permissions to run the 'cluster|slots' command\r\n"
                             : "+OK\r\n";
  });
  o = Options(no_slots);
  o.url = "redis://reader:pw@127.0.0.1:" + std::to_string(no_slots.port());
  EXPECT_THAT(OpenRedisBackend(o), HasCode(StatusCode::kPermissionDenied,
                                           "permission denied for user reader at 127.0.0.1:" +
                                               std::to_string(no_slots.port()) + ": it may not run CLUSTER SLOTS"));
}

// An IPv6 node is named with brackets, as in a URL.
TEST(RedisHostileServer, Ipv6NodeIsNamedInBrackets) {
  EXPECT_THAT(OpenRedisBackend({.url = "redis://[::1]:1"}), HasCode(StatusCode::kIOError, "redis [::1]:1: "));
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
