// The Redis backend against real servers: ACL, timeouts, node failure and
// recovery, eviction, large values. Cluster behaviour is in
// redis_cluster_test.cc; semantics shared with the memory backend in
// kv_backend_conformance_test.cc.
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "kvstore/redis_backend.h"
#include "redis_test_util.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string Pattern(size_t size, int seed) {
  std::string v(size, '\0');
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<char>((i * 2654435761u + seed) >> 13);
  return v;
}

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// A private server the test may stop; skips when none can be started.
#define START_PRIVATE_SERVER(var, ...)                                              \
  KVSTORE_REDIS_SETTING_OR_SKIP(var##_binary, "KVSTORE_TEST_REDIS_SERVER");         \
  RedisServerProcess var(std::vector<std::string>{__VA_ARGS__});                    \
  ASSERT_TRUE(var.Start()) << "could not start " << var##_binary;

TEST(RedisBackend, OpenFailsClearly) {
  EXPECT_THAT(OpenRedisBackend({.url = "redis://nohost"}), HasCode(StatusCode::kInvalidArgument, "port"));
  EXPECT_THAT(OpenRedisBackend({.url = "redis://127.0.0.1:1", .command_timeout = milliseconds(0)}),
              HasCode(StatusCode::kInvalidArgument, "timeouts must be positive"));
  auto start = Clock::now();
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  EXPECT_THAT(OpenRedisBackend({.url = "redis://127.0.0.1:1"}),
              HasCode(StatusCode::kIOError, "redis 127.0.0.1:1: connect:"));
  EXPECT_LT(Since(start), milliseconds(1000));
}

TEST(RedisBackend, RefusedLoginIsPermissionDenied) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  ASSERT_OK_AND_ASSIGN(RedisUrl u, ParseRedisUrl(url));
  const std::string node = u.host + ":" + std::to_string(u.port);
  std::string bad = "redis://default:wrong-password@" + node;
  auto refused = OpenRedisBackend({.url = bad});
  EXPECT_THAT(refused, HasCode(StatusCode::kPermissionDenied,
                               "redis: authentication failed for user default at " + node + ": WRONGPASS"));
  EXPECT_EQ(refused.status().message().find("wrong-password"), std::string_view::npos);
  std::string none = "redis://" + node;
  EXPECT_THAT(OpenRedisBackend({.url = none}),
              HasCode(StatusCode::kPermissionDenied,
                      "redis: authentication failed for user default at " + node + ": NOAUTH"));
}

// An ACL user limited to one key prefix, with only the commands the backend
// sends, on every node of `url`'s deployment. Returns the user's URL.
std::string CreatePrefixUser(const std::vector<std::string>& admin_urls, const std::string& prefix) {
  std::string user = "kvtest-" + std::to_string(getpid());
  for (const std::string& admin_url : admin_urls) {
    auto admin = RedisAdmin::Connect(admin_url);
    EXPECT_OK(admin);
    if (!admin.ok()) return "";
    (*admin)->Must({"ACL", "SETUSER", user, "reset", "on", ">user-pw", "~" + prefix + "*", "-@all",
                    "+get", "+getrange", "+exists", "+set", "+unlink", "+scan", "+multi", "+exec",
                    "+asking", "+cluster|slots"});
  }
  RedisUrl u = ParseRedisUrl(admin_urls[0]).value();
  return "redis://" + user + ":user-pw@" + u.host + ":" + std::to_string(u.port);
}

void ExpectPrefixEnforced(const std::string& user_url, const std::string& prefix) {
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend({.url = user_url,
                                                       .command_timeout = milliseconds(2000)}));
  std::string mine = prefix + "allowed", theirs = "kvtest-other:" + std::to_string(getpid());
  KvPut ok{mine, "v"}, forbidden{theirs, "v"};
  ASSERT_OK_AND_ASSIGN(auto wrote, backend->PutIfAbsent({&ok, 1}));
  EXPECT_EQ(wrote, std::vector<bool>{true});
  ASSERT_OK_AND_ASSIGN(auto got, backend->GetRange(mine, 0, 10));
  EXPECT_EQ(got, "v");
  EXPECT_THAT(backend->PutIfAbsent({&forbidden, 1}),
              HasCode(StatusCode::kPermissionDenied, "SET NX 'kvtest-other:"));
  EXPECT_THAT(backend->Get(std::vector<std::string>{theirs}),
              HasCode(StatusCode::kPermissionDenied, "NOPERM"));
  EXPECT_THAT(backend->GetRange(theirs, 0, 10), HasCode(StatusCode::kPermissionDenied, "NOPERM"));
  EXPECT_THAT(backend->Exists(std::vector<std::string>{theirs}),
              HasCode(StatusCode::kPermissionDenied, "NOPERM"));
  ASSERT_OK_AND_ASSIGN(auto keys, backend->Scan(prefix, 10));
  EXPECT_EQ(keys, std::vector<std::string>{mine});
  EXPECT_OK(backend->Delete(std::vector<std::string>{mine}));
}

TEST(RedisBackend, AclUserIsLimitedToItsPrefix) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  std::string prefix = UniqueKeyPrefix();
  ExpectPrefixEnforced(CreatePrefixUser({url}, prefix), prefix);
}

TEST(RedisBackend, AclUserIsLimitedToItsPrefixOnEveryClusterNode) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_CLUSTER_URL");
  KVSTORE_REDIS_SETTING_OR_SKIP(ports, "KVSTORE_TEST_REDIS_CLUSTER_PORTS");
  RedisUrl u = ParseRedisUrl(url).value();
  std::vector<std::string> admin_urls;
  std::istringstream in(ports);  // "p1,p2,p3"
  for (std::string p; std::getline(in, p, ',');) admin_urls.push_back("redis://default:" + u.password + "@" + u.host + ":" + p);
  ASSERT_EQ(admin_urls.size(), 3u);
  std::string prefix = UniqueKeyPrefix();
  ExpectPrefixEnforced(CreatePrefixUser(admin_urls, prefix), prefix);
}

TEST(RedisBackend, ThirtyTwoMebibyteValues) {
  for (const char* name : {"KVSTORE_TEST_REDIS_URL", "KVSTORE_TEST_REDIS_CLUSTER_URL"}) {
    KVSTORE_REDIS_SETTING_OR_SKIP(url, name);
    // A timeout far below the transfer time of 32 MiB at the minimum rate
    // (4 s): only the absence of progress ends a call. Not the 100 ms
    // default, which a loaded 2-core machine can exceed between two bytes.
    ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend({.url = url,
                                                         .command_timeout = milliseconds(1000)}));
    std::string key = UniqueKeyPrefix() + "big", value = Pattern(32 << 20, 7);
    KvPut item{key, value};
    ASSERT_OK_AND_ASSIGN(auto wrote, backend->PutIfAbsent({&item, 1}));
    EXPECT_EQ(wrote, std::vector<bool>{true});
    ASSERT_OK_AND_ASSIGN(auto got, backend->Get(std::vector<std::string>{key}));
    ASSERT_TRUE(got[0].has_value());
    EXPECT_TRUE(*got[0] == value) << name;
    ASSERT_OK_AND_ASSIGN(auto tail, backend->GetRange(key, (32 << 20) - 100, 1000));
    EXPECT_TRUE(tail == value.substr((32 << 20) - 100));
    EXPECT_OK(backend->Delete(std::vector<std::string>{key}));
    EXPECT_GE(backend->Stats().bytes_sent, uint64_t{32} << 20);
  }
}

TEST(RedisBackend, PausedServerTimesOutThenRecovers) {
  START_PRIVATE_SERVER(server);
  RedisOptions o{.url = server.url(), .command_timeout = milliseconds(100),
                 .backoff_initial = milliseconds(200), .backoff_max = milliseconds(200)};
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(o));
  std::vector<std::string> keys = {"k"};
  ASSERT_OK(backend->Get(keys));
  server.Pause();
  auto start = Clock::now();
  EXPECT_THAT(backend->Get(keys), HasCode(StatusCode::kIOError, "timeout after"));
  EXPECT_GE(Since(start), milliseconds(100));
  EXPECT_LT(Since(start), milliseconds(600));
  // Within the backoff window: refused at once, without touching the network.
  start = Clock::now();
  EXPECT_THAT(backend->Get(keys), HasCode(StatusCode::kIOError, "unavailable for"));
  EXPECT_LT(Since(start), milliseconds(50));
  EXPECT_EQ(backend->Stats().timeouts, 1u);
  EXPECT_EQ(backend->Stats().fast_failures, 1u);
  server.Resume();
  std::this_thread::sleep_for(milliseconds(250));
  EXPECT_OK(backend->Get(keys));
}

TEST(RedisBackend, KilledServerFailsFastThenRecoversAfterRestart) {
  START_PRIVATE_SERVER(server);
  RedisOptions o{.url = server.url(), .backoff_initial = milliseconds(20), .backoff_max = milliseconds(160)};
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend(o));
  KvPut item{"k", "v"};
  ASSERT_OK(backend->PutIfAbsent({&item, 1}));
  server.Kill();
  std::vector<std::string> keys = {"k"};
  EXPECT_THAT(backend->Get(keys), HasCode(StatusCode::kIOError, "connect: Connection refused"));
  uint64_t connects_before = backend->Stats().connects;
  // Hammer the dead node for 600 ms: the backoff keeps reconnect attempts few.
  int calls = 0;
  for (auto start = Clock::now(); Since(start) < milliseconds(600); ++calls) {
    EXPECT_FALSE(backend->Get(keys).ok());
    std::this_thread::sleep_for(milliseconds(1));
  }
  uint64_t attempts = backend->Stats().fast_failures;
  EXPECT_GT(attempts, uint64_t(calls) * 8 / 10) << calls << " calls";
  EXPECT_EQ(backend->Stats().connects, connects_before);  // refused connects are not counted
  ASSERT_TRUE(server.Start());
  auto start = Clock::now();
  Status s;
  while (Since(start) < milliseconds(2000)) {
    s = backend->Get(keys).status();
    if (s.ok()) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_OK(s);
  EXPECT_LT(Since(start), milliseconds(400));  // within about one backoff_max
  ASSERT_OK_AND_ASSIGN(auto values, backend->Get(keys));
  EXPECT_EQ(values[0], std::nullopt);  // a restarted server without persistence is empty
}

TEST(RedisBackend, PooledConnectionsClosedByTheServerAreNotUsed) {
  START_PRIVATE_SERVER(server);
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend({.url = server.url()}));
  std::vector<std::string> keys = {"k"};
  ASSERT_OK(backend->Get(keys));  // leaves an idle connection in the pool
  server.Kill();
  ASSERT_TRUE(server.Start());
  // The pooled connection is dead; the call takes a new one instead of
  // failing and putting a healthy server into its backoff window.
  EXPECT_OK(backend->Get(keys));
  EXPECT_EQ(backend->Stats().failed_calls, 0u);
  EXPECT_EQ(backend->Stats().connects, 2u);
}

TEST(RedisBackend, EvictionUnderMaxmemoryIsSilent) {
  START_PRIVATE_SERVER(server, "--maxmemory", "24mb", "--maxmemory-policy", "allkeys-lru");
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend({.url = server.url(),
                                                       .command_timeout = milliseconds(2000)}));
  std::vector<std::string> keys, values;
  for (int i = 0; i < 64; ++i) {
    keys.push_back("chunk:" + std::to_string(i));
    values.push_back(Pattern(1 << 20, i));
    KvPut item{keys.back(), values.back()};
    ASSERT_OK_AND_ASSIGN(auto wrote, backend->PutIfAbsent({&item, 1}));
    EXPECT_EQ(wrote, std::vector<bool>{true});
  }
  ASSERT_OK_AND_ASSIGN(auto got, backend->Get(keys));
  int present = 0;
  for (int i = 0; i < 64; ++i) {
    if (!got[i]) continue;
    ++present;
    EXPECT_TRUE(*got[i] == values[i]) << keys[i];
  }
  EXPECT_GT(present, 0);
  EXPECT_LT(present, 30);  // 64 MiB written into 24 MiB
}

TEST(RedisBackend, NoEvictionPolicyIsResourceExhausted) {
  START_PRIVATE_SERVER(server, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction");
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend({.url = server.url(),
                                                       .command_timeout = milliseconds(2000)}));
  std::string value = Pattern(1 << 20, 1);
  Status last;
  for (int i = 0; i < 32 && last.ok(); ++i) {
    std::string key = "key:" + std::to_string(i);
    KvPut item{key, value};
    last = backend->PutIfAbsent({&item, 1}).status();
  }
  EXPECT_THAT(last, HasCode(StatusCode::kResourceExhausted, "OOM"));
}

}  // namespace
}  // namespace kvstore::testing
