// One suite, three backends: the in-memory KvBackend, Redis (single node)
// and Redis Cluster must answer every call alike.
#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "kvstore/kv_backend.h"
#include "kvstore/redis_backend.h"
#include "libkvstore/remote/mem_kv_backend.h"
#include "redis_test_util.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

enum class Kind { kMemory, kRedis, kRedisCluster };

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kMemory: return "Memory";
    case Kind::kRedis: return "Redis";
    case Kind::kRedisCluster: return "RedisCluster";
  }
  return "Unknown";
}

class KvBackendConformance : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    prefix_ = UniqueKeyPrefix();
    if (GetParam() == Kind::kMemory) {
      backend_ = NewMemKvBackend();
      return;
    }
    const char* name = GetParam() == Kind::kRedis ? "KVSTORE_TEST_REDIS_URL"
                                                   : "KVSTORE_TEST_REDIS_CLUSTER_URL";
    KVSTORE_REDIS_SETTING_OR_SKIP(url, name);
    url_ = url;
    // Generous timeouts: the suite checks semantics, on a busy 2-core machine.
    RedisOptions options{.url = url, .connect_timeout = std::chrono::seconds(2),
                         .command_timeout = std::chrono::seconds(5)};
    ASSERT_OK_AND_ASSIGN(backend_, OpenRedisBackend(options));
  }

  void TearDown() override {
    if (backend_ == nullptr) return;
    auto keys = backend_->Scan(prefix_, 100000);
    if (keys.ok()) {
      EXPECT_OK(backend_->Delete(*keys));
    }
  }

  std::string Key(std::string_view name) const { return prefix_ + std::string(name); }

  void Put(const std::string& key, std::string_view value) {
    KvPut item{key, value};
    ASSERT_OK_AND_ASSIGN(std::vector<bool> wrote, backend_->PutIfAbsent({&item, 1}));
    ASSERT_EQ(wrote, std::vector<bool>{true}) << key;
  }

  // Makes `key` hold another type than a byte string (a Redis LIST).
  void PutOtherType(const std::string& key) {
    if (GetParam() == Kind::kMemory) {
      static_cast<MemKvBackend*>(backend_.get())->PutOtherType(key);
    } else {
      MustPutList(url_, key);
    }
  }

  std::string url_;  // a Redis backend's
  std::string prefix_;
  std::unique_ptr<KvBackend> backend_;
};

TEST_P(KvBackendConformance, GetReturnsValuesAndNulloptInArgumentOrder) {
  Put(Key("a"), "alpha");
  Put(Key("b"), "beta");
  std::vector<std::string> keys = {Key("b"), Key("missing"), Key("a"), Key("b")};
  ASSERT_OK_AND_ASSIGN(auto values, backend_->Get(keys));
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0], "beta");
  EXPECT_EQ(values[1], std::nullopt);
  EXPECT_EQ(values[2], "alpha");
  EXPECT_EQ(values[3], "beta");
}

TEST_P(KvBackendConformance, PutIfAbsentKeepsTheFirstValue) {
  std::string k = Key("k"), other = Key("other");
  KvPut items[] = {{k, "first"}, {k, "second"}, {other, ""}};
  ASSERT_OK_AND_ASSIGN(std::vector<bool> wrote, backend_->PutIfAbsent(items));
  EXPECT_EQ(wrote, (std::vector<bool>{true, false, true}));
  KvPut again{k, "third"};
  ASSERT_OK_AND_ASSIGN(wrote, backend_->PutIfAbsent({&again, 1}));
  EXPECT_EQ(wrote, std::vector<bool>{false});
  ASSERT_OK_AND_ASSIGN(auto values, backend_->Get(std::vector<std::string>{k, other}));
  EXPECT_EQ(values[0], "first");
  EXPECT_EQ(values[1], "");  // an empty value is a value, not an absence
}

TEST_P(KvBackendConformance, GetRangeClampsLikeGetrange) {
  std::string k = Key("digits"), empty = Key("empty");
  Put(k, "0123456789");
  Put(empty, "");
  struct Case {
    int64_t start, length;
    std::string want;
  } cases[] = {{0, 4, "0123"}, {8, 10, "89"}, {10, 5, ""}, {20, 1, ""},
               {3, 0, ""},     {0, 10, "0123456789"}, {9, INT64_MAX, "9"},
               {INT64_MAX - 1, 10, ""}};
  for (const Case& c : cases) {
    ASSERT_OK_AND_ASSIGN(auto got, backend_->GetRange(k, c.start, c.length));
    EXPECT_EQ(got, c.want) << c.start << "+" << c.length;
  }
  ASSERT_OK_AND_ASSIGN(auto got, backend_->GetRange(empty, 0, 5));
  EXPECT_EQ(got, "");
  ASSERT_OK_AND_ASSIGN(got, backend_->GetRange(Key("missing"), 0, 5));
  EXPECT_EQ(got, std::nullopt);
  ASSERT_OK_AND_ASSIGN(got, backend_->GetRange(Key("missing"), 0, 0));
  EXPECT_EQ(got, std::nullopt);
}

TEST_P(KvBackendConformance, ExistsAndDelete) {
  Put(Key("x"), "1");
  Put(Key("y"), "2");
  std::vector<std::string> keys = {Key("x"), Key("missing"), Key("y")};
  ASSERT_OK_AND_ASSIGN(std::vector<bool> exists, backend_->Exists(keys));
  EXPECT_EQ(exists, (std::vector<bool>{true, false, true}));
  EXPECT_OK(backend_->Delete(std::vector<std::string>{Key("x"), Key("missing")}));
  ASSERT_OK_AND_ASSIGN(exists, backend_->Exists(keys));
  EXPECT_EQ(exists, (std::vector<bool>{false, false, true}));
  ASSERT_OK_AND_ASSIGN(auto values, backend_->Get(keys));
  EXPECT_EQ(values[0], std::nullopt);
  EXPECT_EQ(values[2], "2");
}

// A value refused by a reader is deleted only while it is still the value
// read: one written since (same length, other bytes; or another length)
// survives. Binary bytes and a 1 MiB value go through Redis's script alike.
TEST_P(KvBackendConformance, DeleteIfEqualsDeletesOnlyTheValueGiven) {
  auto del = [&](const std::string& key, std::string_view expected) -> std::string {
    Result<bool> r = backend_->DeleteIfEquals(key, expected);
    return !r.ok() ? r.status().ToString() : *r ? "deleted" : "kept";
  };
  const std::string bad("bad\0value", 9), good("goo\0value", 9);
  Put(Key("k"), good);
  EXPECT_EQ(del(Key("k"), bad), "kept");
  EXPECT_EQ(del(Key("k"), good + "x"), "kept");
  EXPECT_EQ(del(Key("k"), good.substr(0, 8)), "kept");
  ASSERT_OK_AND_ASSIGN(auto values, backend_->Get(std::vector<std::string>{Key("k")}));
  EXPECT_EQ(values[0], good);
  EXPECT_EQ(del(Key("k"), good), "deleted");
  ASSERT_OK_AND_ASSIGN(std::vector<bool> exists, backend_->Exists(std::vector<std::string>{Key("k")}));
  EXPECT_EQ(exists, std::vector<bool>{false});
  EXPECT_EQ(del(Key("k"), good), "kept");
  EXPECT_EQ(del(Key("missing"), ""), "kept");
  Put(Key("empty"), "");
  EXPECT_EQ(del(Key("empty"), "x"), "kept");
  EXPECT_EQ(del(Key("empty"), ""), "deleted");

  std::string big(size_t{1} << 20, 'v');
  Put(Key("big"), big);
  big.back() = 'w';
  EXPECT_EQ(del(Key("big"), big), "kept");
  big.back() = 'v';
  EXPECT_EQ(del(Key("big"), big), "deleted");
}

// A key of another type (a LIST where a value should be) is reported per
// key, and only the compare-and-delete for another type removes it: a
// byte string written in its place since survives.
TEST_P(KvBackendConformance, AKeyOfAnotherTypeIsReportedAndDeletedOnlyWhileItIsOne) {
  Put(Key("value"), "v");
  PutOtherType(Key("list"));
  const std::vector<std::string> keys = {Key("value"), Key("list"), Key("missing")};
  EXPECT_THAT(backend_->Get(keys), HasCode(StatusCode::kFailedPrecondition, "WRONGTYPE"));
  std::vector<bool> other_type;
  ASSERT_OK_AND_ASSIGN(auto values, backend_->Get(keys, &other_type));
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>{"v", std::nullopt, std::nullopt}));
  EXPECT_EQ(other_type, (std::vector<bool>{false, true, false}));
  EXPECT_THAT(backend_->GetRange(Key("list"), 0, 8), HasCode(StatusCode::kFailedPrecondition, "WRONGTYPE"));
  ASSERT_OK_AND_ASSIGN(std::vector<bool> exists, backend_->Exists(keys));
  EXPECT_EQ(exists, (std::vector<bool>{true, true, false}));
  const std::string list = Key("list");
  KvPut put{list, "good"};
  ASSERT_OK_AND_ASSIGN(std::vector<bool> wrote, backend_->PutIfAbsent({&put, 1}));
  EXPECT_EQ(wrote, std::vector<bool>{false});

  auto said = [](const Result<bool>& r) -> std::string {
    return !r.ok() ? r.status().ToString() : *r ? "deleted" : "kept";
  };
  EXPECT_EQ(said(backend_->DeleteIfEquals(Key("list"), "")), "kept");
  EXPECT_EQ(said(backend_->DeleteIfOtherType(Key("value"))), "kept");
  EXPECT_EQ(said(backend_->DeleteIfOtherType(Key("missing"))), "kept");
  EXPECT_EQ(said(backend_->DeleteIfOtherType(Key("list"))), "deleted");
  ASSERT_OK_AND_ASSIGN(exists, backend_->Exists(keys));
  EXPECT_EQ(exists, (std::vector<bool>{true, false, false}));
  // The key holds a good value again: the late delete keeps it.
  Put(Key("list"), "good");
  EXPECT_EQ(said(backend_->DeleteIfOtherType(Key("list"))), "kept");
  ASSERT_OK_AND_ASSIGN(values, backend_->Get(std::vector<std::string>{Key("list")}));
  EXPECT_EQ(values[0], "good");
}

TEST_P(KvBackendConformance, ScanFindsExactlyThePrefixTakenLiterally) {
  std::set<std::string> want;
  for (int i = 0; i < 25; ++i) {
    want.insert(Key("s:" + std::to_string(i)));
    Put(Key("s:" + std::to_string(i)), "v");
  }
  Put(Key("t:0"), "v");           // a sibling prefix
  Put(Key("g*?[x]\\:0"), "v");    // glob characters are literal in a prefix
  Put(Key("gX:0"), "v");          // what the glob would match if not escaped
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> keys, backend_->Scan(Key("s:"), 1000));
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()), want);
  EXPECT_EQ(keys.size(), want.size());  // no duplicates
  ASSERT_OK_AND_ASSIGN(keys, backend_->Scan(Key("s:"), 10));
  EXPECT_EQ(keys.size(), 10u);
  for (const std::string& k : keys) EXPECT_TRUE(want.count(k)) << k;
  ASSERT_OK_AND_ASSIGN(keys, backend_->Scan(Key("g*?[x]\\:"), 1000));
  EXPECT_EQ(keys, std::vector<std::string>{Key("g*?[x]\\:0")});
  ASSERT_OK_AND_ASSIGN(keys, backend_->Scan(Key("nothing:"), 1000));
  EXPECT_TRUE(keys.empty());
  ASSERT_OK_AND_ASSIGN(keys, backend_->Scan(Key("s:"), 0));
  EXPECT_TRUE(keys.empty());
}

TEST_P(KvBackendConformance, BinaryKeysAndValuesRoundTrip) {
  std::string value;
  for (int i = 0; i < 256; ++i) value.push_back(static_cast<char>(i));
  std::string keys[] = {Key(std::string("nul\0key", 7)), Key("crlf\r\n$3\r\n"), Key("{tag}x")};
  for (const std::string& k : keys) Put(k, value);
  ASSERT_OK_AND_ASSIGN(auto values, backend_->Get(keys));
  for (const auto& v : values) EXPECT_EQ(v, value);
  ASSERT_OK_AND_ASSIGN(auto range, backend_->GetRange(keys[0], 250, 100));
  EXPECT_EQ(range, value.substr(250));
}

TEST_P(KvBackendConformance, EmptyBatchesAreEmptyResults) {
  std::vector<std::string> none;
  ASSERT_OK_AND_ASSIGN(auto values, backend_->Get(none));
  EXPECT_TRUE(values.empty());
  ASSERT_OK_AND_ASSIGN(auto exists, backend_->Exists(none));
  EXPECT_TRUE(exists.empty());
  ASSERT_OK_AND_ASSIGN(auto wrote, backend_->PutIfAbsent({}));
  EXPECT_TRUE(wrote.empty());
  EXPECT_OK(backend_->Delete(none));
}

TEST_P(KvBackendConformance, LargeBatchKeepsOrder) {
  std::vector<std::string> keys, values;
  std::vector<KvPut> items;
  for (int i = 0; i < 500; ++i) {
    keys.push_back(Key("batch:" + std::to_string(i)));
    values.push_back(std::string(static_cast<size_t>(i % 97) * 300, static_cast<char>('a' + i % 26)));
  }
  for (int i = 0; i < 500; ++i) items.push_back({keys[i], values[i]});
  ASSERT_OK_AND_ASSIGN(std::vector<bool> wrote, backend_->PutIfAbsent(items));
  EXPECT_EQ(std::count(wrote.begin(), wrote.end(), true), 500);
  std::reverse(keys.begin(), keys.end());
  std::reverse(values.begin(), values.end());
  ASSERT_OK_AND_ASSIGN(auto got, backend_->Get(keys));
  for (int i = 0; i < 500; ++i) EXPECT_EQ(got[i], values[i]) << keys[i];
}

TEST_P(KvBackendConformance, OneMebibyteValue) {
  std::string value(1 << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 131 + (i >> 12));
  Put(Key("big"), value);
  ASSERT_OK_AND_ASSIGN(auto got, backend_->Get(std::vector<std::string>{Key("big")}));
  EXPECT_TRUE(got[0] == value);
  ASSERT_OK_AND_ASSIGN(auto tail, backend_->GetRange(Key("big"), (1 << 20) - 1000, 5000));
  EXPECT_TRUE(tail == value.substr((1 << 20) - 1000));
}

TEST_P(KvBackendConformance, ManyThreadsAtOnce) {
  constexpr int kThreads = 6, kRounds = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::string k = Key("thread" + std::to_string(t) + ":" + std::to_string(r));
        std::string v = k + k;
        KvPut item{k, v};
        auto wrote = backend_->PutIfAbsent({&item, 1});
        auto got = backend_->Get(std::vector<std::string>{k});
        if (!wrote.ok() || !got.ok() || (*got)[0] != v) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(backend_->Stats().calls, uint64_t{kThreads * kRounds * 2});
}

INSTANTIATE_TEST_SUITE_P(Backends, KvBackendConformance,
                         ::testing::Values(Kind::kMemory, Kind::kRedis, Kind::kRedisCluster),
                         KindName);

}  // namespace
}  // namespace kvstore::testing
