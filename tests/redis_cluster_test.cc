// The Redis backend on the 3-master cluster of scripts/redis-services.sh:
// recognised from any node, keys spread over every master, MOVED after a
// slot migration and ASK during one.
#include <unistd.h>

#include <sstream>

#include "kvstore/redis_backend.h"
#include "libkvstore/remote/redis_slots.h"
#include "redis_test_util.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

// Calls that are not about timeouts get seconds, not the 100 ms default: under
// ASan on a busy 2-core machine a 300-key batch took longer (a flaky CI run).
constexpr std::chrono::milliseconds kPatient{2000};

class RedisCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_CLUSTER_URL");
    KVSTORE_REDIS_SETTING_OR_SKIP(ports, "KVSTORE_TEST_REDIS_CLUSTER_PORTS");
    url_ = ParseRedisUrl(url).value();
    std::istringstream in(ports);  // "p1,p2,p3"
    for (std::string port; std::getline(in, port, ',');) {
      ports_.push_back(std::stoi(port));
      ASSERT_OK_AND_ASSIGN(auto admin, RedisAdmin::Connect(NodeUrl(ports_.back())));
      ids_.push_back(admin->Must({"CLUSTER", "MYID"}).str);
      admins_.push_back(std::move(admin));
    }
    ASSERT_EQ(ports_.size(), 3u);
    prefix_ = UniqueKeyPrefix();
  }

  std::string NodeUrl(int port) const {
    return "redis://default:" + url_.password + "@" + url_.host + ":" + std::to_string(port);
  }

  // Index (into ports_) of the master that serves `slot`.
  int Owner(int slot) {
    RedisReply reply = admins_[0]->Must({"CLUSTER", "SLOTS"});
    auto ranges = ParseClusterSlots(reply, url_.host);
    EXPECT_OK(ranges);
    for (const RedisSlotRange& r : ranges.value_or(std::vector<RedisSlotRange>{})) {
      if (slot < r.first || slot > r.last) continue;
      for (size_t i = 0; i < ports_.size(); ++i) {
        if (ports_[i] == r.port) return static_cast<int>(i);
      }
    }
    ADD_FAILURE() << "no owner for slot " << slot;
    return 0;
  }

  // The first half of a slot migration: `to` imports, `from` migrates.
  void StartMigration(int slot, int from, int to) {
    admins_[to]->Must({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", ids_[from]});
    admins_[from]->Must({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", ids_[to]});
  }

  // Moves the slot's remaining keys, then tells every node the new owner.
  void FinishMigration(int slot, int from, int to) {
    for (;;) {
      RedisReply keys = admins_[from]->Must({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100"});
      if (keys.elements.empty()) break;
      std::vector<std::string> migrate = {"MIGRATE", url_.host, std::to_string(ports_[to]), "", "0",
                                          "5000", "AUTH", url_.password, "KEYS"};
      for (const RedisReply& k : keys.elements) migrate.push_back(k.str);
      admins_[from]->Must(migrate);
    }
    for (int node : {to, from, 3 - to - from}) {
      admins_[node]->Must({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", ids_[to]});
    }
  }

  size_t KeysOn(int node) {
    size_t n = 0;
    std::string cursor = "0";
    do {
      RedisReply r = admins_[node]->Must({"SCAN", cursor, "MATCH", prefix_ + "*", "COUNT", "1000"});
      if (r.elements.size() != 2) return n;
      cursor = r.elements[0].str;
      n += r.elements[1].elements.size();
    } while (cursor != "0");
    return n;
  }

  RedisUrl url_;
  std::vector<int> ports_;
  std::vector<std::string> ids_;
  std::vector<std::unique_ptr<RedisAdmin>> admins_;
  std::string prefix_;
};

TEST_F(RedisCluster, RecognisedFromAnyNode) {
  std::string key = prefix_ + "k";
  KvPut item{key, "v"};
  for (size_t i = 0; i < ports_.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(
        auto backend, OpenRedisBackend({.url = NodeUrl(ports_[i]), .command_timeout = kPatient}));
    EXPECT_EQ(backend->Describe(), "redis cluster 127.0.0.1:" + std::to_string(ports_[i]) + " (3 masters)");
    ASSERT_OK_AND_ASSIGN(auto wrote, backend->PutIfAbsent({&item, 1}));
    EXPECT_EQ(wrote, std::vector<bool>{i == 0});  // written once, through the first node
    ASSERT_OK_AND_ASSIGN(auto got, backend->Get(std::vector<std::string>{key}));
    EXPECT_EQ(got[0], "v");
    EXPECT_EQ(backend->Stats().moved, 0u);  // routed right the first time
    if (i == 2) {
      EXPECT_OK(backend->Delete(std::vector<std::string>{key}));
    }
  }
}

TEST_F(RedisCluster, KeysSpreadOverEveryMaster) {
  ASSERT_OK_AND_ASSIGN(auto backend,
                       OpenRedisBackend({.url = NodeUrl(ports_[0]), .command_timeout = kPatient}));
  std::vector<std::string> keys;
  std::vector<KvPut> items;
  for (int i = 0; i < 300; ++i) keys.push_back(prefix_ + std::to_string(i));
  for (const std::string& k : keys) items.push_back({k, k});
  ASSERT_OK(backend->PutIfAbsent(items));
  size_t total = 0;
  for (int node = 0; node < 3; ++node) {
    size_t n = KeysOn(node);
    EXPECT_GT(n, 50u) << "master " << ports_[node];
    total += n;
  }
  EXPECT_EQ(total, 300u);
  ASSERT_OK_AND_ASSIGN(auto scanned, backend->Scan(prefix_, 1000));
  EXPECT_EQ(scanned.size(), 300u);
  EXPECT_OK(backend->Delete(keys));
  EXPECT_EQ(KeysOn(0) + KeysOn(1) + KeysOn(2), 0u);
}

TEST_F(RedisCluster, MovedAfterSlotMigrationUpdatesTheSlotMap) {
  std::string key = prefix_ + "{moved-" + std::to_string(getpid()) + "}k";
  int slot = KeyHashSlot(key), from = Owner(slot), to = (from + 1) % 3;
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend({.url = NodeUrl(ports_[0]),
                                                       .command_timeout = std::chrono::seconds(2)}));
  KvPut item{key, "before the move"};
  ASSERT_OK(backend->PutIfAbsent({&item, 1}));
  uint64_t loads = backend->Stats().slot_map_loads;

  StartMigration(slot, from, to);
  FinishMigration(slot, from, to);
  ASSERT_EQ(Owner(slot), to);

  ASSERT_OK_AND_ASSIGN(auto got, backend->Get(std::vector<std::string>{key}));
  EXPECT_EQ(got[0], "before the move");
  EXPECT_EQ(backend->Stats().moved, 1u);
  EXPECT_GT(backend->Stats().slot_map_loads, loads);
  // The slot map knows now: no second redirection.
  ASSERT_OK_AND_ASSIGN(auto exists, backend->Exists(std::vector<std::string>{key}));
  EXPECT_EQ(exists, std::vector<bool>{true});
  EXPECT_EQ(backend->Stats().moved, 1u);
  EXPECT_OK(backend->Delete(std::vector<std::string>{key}));
}

TEST_F(RedisCluster, AskDuringMigrationThenMovedAfterIt) {
  std::string tag = "{ask-" + std::to_string(getpid()) + "}";
  std::string old_key = prefix_ + tag + "old", new_key = prefix_ + tag + "new";
  int slot = KeyHashSlot(old_key), from = Owner(slot), to = (from + 2) % 3;
  ASSERT_OK_AND_ASSIGN(auto backend, OpenRedisBackend({.url = NodeUrl(ports_[0]),
                                                       .command_timeout = std::chrono::seconds(2)}));
  KvPut old_item{old_key, "old value"}, new_item{new_key, "new value"};
  ASSERT_OK(backend->PutIfAbsent({&old_item, 1}));

  StartMigration(slot, from, to);
  // The new key is not on the migrating node: it answers ASK, and the write
  // lands on the importing node.
  ASSERT_OK_AND_ASSIGN(auto wrote, backend->PutIfAbsent({&new_item, 1}));
  EXPECT_EQ(wrote, std::vector<bool>{true});
  EXPECT_EQ(backend->Stats().asked, 1u);
  ASSERT_OK_AND_ASSIGN(auto got, backend->Get(std::vector<std::string>{old_key, new_key}));
  EXPECT_EQ(got[0], "old value");
  EXPECT_EQ(got[1], "new value");
  // One ASK, then ASKING + MULTI on the importing node: the server keeps
  // the ASKING flag for the whole MULTI block, so its queued commands are
  // not redirected again.
  uint64_t asked = backend->Stats().asked;
  ASSERT_OK_AND_ASSIGN(auto range, backend->GetRange(new_key, 4, 100));
  EXPECT_EQ(range, "value");
  EXPECT_EQ(backend->Stats().asked, asked + 1);
  ASSERT_OK_AND_ASSIGN(auto missing, backend->GetRange(prefix_ + tag + "none", 0, 1));
  EXPECT_EQ(missing, std::nullopt);
  EXPECT_GE(backend->Stats().asked, 3u);
  EXPECT_EQ(backend->Stats().moved, 0u);  // ASK never changes the slot map

  FinishMigration(slot, from, to);
  ASSERT_OK_AND_ASSIGN(got, backend->Get(std::vector<std::string>{old_key, new_key}));
  EXPECT_EQ(got[0], "old value");
  EXPECT_EQ(got[1], "new value");
  EXPECT_GE(backend->Stats().moved, 1u);
  EXPECT_OK(backend->Delete(std::vector<std::string>{old_key, new_key}));
}

}  // namespace
}  // namespace kvstore::testing
