#include "redis_test_util.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libkvstore/util/platform_config.h"
#if KVSTORE_HAVE_PDEATHSIG
#include <sys/prctl.h>
#endif

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "libkvstore/remote/redis_exchange.h"

namespace kvstore::testing {

std::string RedisTestSetting(std::string_view name) {
  std::string key(name);
  if (const char* v = std::getenv(key.c_str()); v != nullptr && *v != '\0') return v;
  const char* file = std::getenv("KVSTORE_TEST_REDIS_ENV");
  if (file == nullptr) return "";
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(key + "=")) return line.substr(key.size() + 1);
  }
  return "";
}

std::string UniqueKeyPrefix() {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = t != nullptr ? std::string(t->test_suite_name()) + "." + t->name() : "none";
  return "kvtest:" + std::to_string(getpid()) + ":" + name + ":";
}

Result<std::unique_ptr<RedisAdmin>> RedisAdmin::Connect(const std::string& url) {
  KV_ASSIGN_OR_RETURN(RedisUrl u, ParseRedisUrl(url));
  auto admin = std::make_unique<RedisAdmin>();
  bool timed_out = false;
  KV_ASSIGN_OR_RETURN(admin->connection_, RedisConnection::Connect(u.host, u.port, std::chrono::seconds(2),
                                                                   1 << 30, timed_out));
  if (!u.password.empty()) {
    KV_ASSIGN_OR_RETURN(RedisReply r, admin->Run({"AUTH", u.user.empty() ? "default" : u.user, u.password}));
    if (r.is_error()) return Status::FailedPrecondition("admin AUTH: " + r.str);
  }
  return admin;
}

Result<RedisReply> RedisAdmin::Run(const std::vector<std::string>& args) {
  std::vector<std::string_view> views(args.begin(), args.end());
  RedisExchange e;
  e.connection = connection_.get();
  e.pipeline.Add(views);
  RedisExchange* one[] = {&e};
  RedisTraffic traffic;
  RedisDeadline deadline{std::chrono::steady_clock::now(), std::chrono::seconds(10), 0};
  RunExchanges(one, deadline, traffic);
  KV_RETURN_IF_ERROR(e.status);
  return std::move(e.replies[0]);
}

RedisReply RedisAdmin::Must(const std::vector<std::string>& args) {
  Result<RedisReply> r = Run(args);
  std::string command = args.empty() ? "" : args[0] + (args.size() > 1 ? " " + args[1] : "");
  if (!r.ok()) {
    ADD_FAILURE() << command << ": " << r.status().ToString();
    return {};
  }
  if (r->is_error()) ADD_FAILURE() << command << ": " << r->str;
  return std::move(r).value();
}

void MustPutList(const std::string& url, const std::string& key) {
  Result<std::unique_ptr<RedisAdmin>> admin = RedisAdmin::Connect(url);
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  Result<RedisReply> r = (*admin)->Run({"RPUSH", key, "not a chunk"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (r->error_code() == "MOVED") {  // "MOVED <slot> <host>:<port>"
    const std::string target = r->str.substr(r->str.rfind(' ') + 1);
    const RedisUrl u = ParseRedisUrl(url).value();
    const std::string credentials = u.password.empty() ? "" : u.user + ":" + u.password + "@";
    admin = RedisAdmin::Connect("redis://" + credentials + target);
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    (*admin)->Must({"RPUSH", key, "not a chunk"});
    return;
  }
  ASSERT_FALSE(r->is_error()) << r->str;
}

RedisServerProcess::RedisServerProcess(std::vector<std::string> extra_args)
    : extra_args_(std::move(extra_args)) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvstore-redis-XXXXXX").string();
  if (mkdtemp(tmpl.data()) != nullptr) dir_ = tmpl;
  // A free port: bind to port 0 and let the kernel choose.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port_ = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
}

RedisServerProcess::~RedisServerProcess() {
  Kill();
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

bool RedisServerProcess::Start() {
  std::string binary = RedisTestSetting("KVSTORE_TEST_REDIS_SERVER");
  if (binary.empty() || port_ == 0 || dir_.empty()) return false;
  std::vector<std::string> args = {binary, "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--daemonize", "no",
                                   "--dir", dir_, "--logfile", dir_ + "/redis.log"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  pid_ = fork();
  if (pid_ == 0) {
#if KVSTORE_HAVE_PDEATHSIG
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
#endif  // elsewhere a test that crashes leaves its server running
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    auto admin = RedisAdmin::Connect(url());
    if (admin.ok()) {
      Result<RedisReply> pong = (*admin)->Run({"PING"});
      if (pong.ok() && pong->str == "PONG") return true;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

void RedisServerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RedisServerProcess::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisServerProcess::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

}  // namespace kvstore::testing
