// Helpers for the tests that talk to real Redis servers.
//
// Servers come from scripts/redis-services.sh (ctest starts it as a fixture
// and points KVSTORE_TEST_REDIS_ENV at the env file it writes) or from the
// environment (KVSTORE_TEST_REDIS_URL, KVSTORE_TEST_REDIS_CLUSTER_URL,
// KVSTORE_TEST_REDIS_SERVER). Tests skip, saying which setting is missing,
// when a server is not configured.
#ifndef KVSTORE_TESTS_REDIS_TEST_UTIL_H_
#define KVSTORE_TESTS_REDIS_TEST_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/redis_backend.h"
#include "libkvstore/remote/redis_connection.h"
#include "libkvstore/remote/redis_reply.h"

namespace kvstore::testing {

// The setting `name`: the environment variable, else the line NAME=VALUE of
// the file named by KVSTORE_TEST_REDIS_ENV; empty when neither has it.
std::string RedisTestSetting(std::string_view name);

// Skips the test when the setting is missing; `var` gets its value.
#define KVSTORE_REDIS_SETTING_OR_SKIP(var, name)                                          \
  std::string var = ::kvstore::testing::RedisTestSetting(name);                           \
  if (var.empty()) {                                                                      \
    GTEST_SKIP() << name << " is not set: run scripts/redis-services.sh start and export " \
                 << "what it prints (ctest starts the servers itself)";                   \
  }

// "kvtest:<pid>:<test name>:", unique per test and process, so that tests
// running at once on the same servers never share keys.
std::string UniqueKeyPrefix();

// One authenticated connection for commands the backend does not offer
// (ACL SETUSER, CLUSTER SETSLOT, MIGRATE, CONFIG SET, ...).
class RedisAdmin {
 public:
  static Result<std::unique_ptr<RedisAdmin>> Connect(const std::string& url);
  // Sends one command and waits (up to 10 s) for its reply.
  Result<RedisReply> Run(const std::vector<std::string>& args);
  // Run that fails the test on a transport error or an error reply.
  RedisReply Must(const std::vector<std::string>& args);

 private:
  std::unique_ptr<RedisConnection> connection_;
};

// Makes `key` a LIST on the node that owns it (following a cluster's MOVED
// from the URL's node): a key of another type than a byte string. Fails
// the test when it cannot.
void MustPutList(const std::string& url, const std::string& key);

// A private redis-server (no password, no persistence) for tests that kill,
// pause or fill a server. Its port stays the same across restarts.
class RedisServerProcess {
 public:
  explicit RedisServerProcess(std::vector<std::string> extra_args = {});
  ~RedisServerProcess();
  // Starts the server and waits until it accepts connections.
  bool Start();
  void Kill();    // SIGKILL, then reaps it
  void Pause();   // SIGSTOP
  void Resume();  // SIGCONT
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  std::vector<std::string> extra_args_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  std::string dir_;
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_REDIS_TEST_UTIL_H_
