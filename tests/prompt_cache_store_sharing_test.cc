// Servers of one machine sharing one PromptCacheStore directory, as real
// processes (fork/exec of kvstore_store_worker, store_sharing/): each serves
// what the others wrote, removals propagate, the budget holds across them,
// concurrent writes and evictions never serve a wrong entry, and a killed
// process leaves nothing the others trip on.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/prompt_cache_store.h"
#include "store_sharing/store_entries.h"
#include "testutil.h"

namespace kvstore {
namespace {

using sharing::CacheOf;
using sharing::IsExactly;
using sharing::kModel;
using sharing::TokensOfKey;

// A worker process; its standard output goes to `out`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& out) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, STDOUT_FILENO);
    std::vector<std::string> copy = args;
    copy.insert(copy.begin(), KVSTORE_STORE_WORKER);
    std::vector<char*> argv;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(KVSTORE_STORE_WORKER, argv.data());
    _exit(127);
  }
  return pid;
}

int ExitCode(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct DirUsage {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t temp_files = 0;
};
DirUsage Usage(const std::string& dir) {
  DirUsage u;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".kvtmp-") != std::string::npos) {
      ++u.temp_files;
    } else if (name.ends_with(".safetensors")) {
      ++u.entries;
      u.bytes += static_cast<int64_t>(e.file_size());
    }
  }
  return u;
}

class StoreSharingTest : public ::testing::Test {
 protected:
  std::unique_ptr<PromptCacheStore> Open(int64_t max_bytes = int64_t{1} << 30) {
    auto store = PromptCacheStore::Open(Env::Default(), dir_, {.max_bytes = max_bytes});
    EXPECT_OK(store);
    if (!store.ok()) return nullptr;
    EXPECT_OK((*store)->WaitUntilIndexed().status());
    return std::move(store).value();
  }
  std::vector<std::string> Put(int64_t max_bytes, int64_t first, int64_t count) {
    return {"put", dir_, std::to_string(max_bytes), std::to_string(first), std::to_string(count)};
  }
  std::vector<std::string> Churn(int64_t max_bytes, int seed, double seconds, int64_t keys) {
    return {"churn", dir_, std::to_string(max_bytes), std::to_string(seed), std::to_string(seconds),
            std::to_string(keys)};
  }
  int64_t EntryBytes() {  // the largest entry's file (24 tokens)
    return 4096 + 2 * 2 * 24 * 8 * 4;
  }

  testing::TempDir tmp_;
  const std::string dir_ = tmp_.Join("store");
  const std::string out_ = tmp_.Join("out");
};

TEST_F(StoreSharingTest, EntriesAnotherProcessWritesAfterOpenAreServed) {
  std::unique_ptr<PromptCacheStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(ExitCode(Spawn(Put(int64_t{1} << 30, 0, 10), out_)), 0);
  for (int64_t key = 0; key < 10; ++key) {
    const std::vector<int32_t> tokens = TokensOfKey(key);
    ASSERT_OK_AND_ASSIGN(auto hit, store->FetchLongestPrefix(kModel, tokens));
    ASSERT_TRUE(hit.has_value()) << "key " << key;
    EXPECT_EQ(hit->length, static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(IsExactly(hit->cache, tokens, hit->length)) << "key " << key;
  }
  EXPECT_EQ(store->entries(), 10);
  // And the other way: what this process writes, a new process serves
  // (its churn counts a hit only when exact, and fails otherwise).
  for (int64_t key = 10; key < 20; ++key) {
    const std::vector<int32_t> tokens = TokensOfKey(key);
    ASSERT_OK(store->Put(kModel, tokens, CacheOf(tokens, static_cast<int64_t>(tokens.size()))));
  }
  ASSERT_EQ(ExitCode(Spawn(Churn(int64_t{1} << 30, 1, 0.5, 20), out_)), 0) << ReadText(out_);
}

TEST_F(StoreSharingTest, RemovalsPropagateAndTheBudgetHoldsAcrossProcesses) {
  std::unique_ptr<PromptCacheStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(ExitCode(Spawn(Put(int64_t{1} << 30, 0, 20), out_)), 0);
  ASSERT_OK(store->FetchLongestPrefix(kModel, TokensOfKey(0)).status());  // reads the manifest
  EXPECT_EQ(store->entries(), 20);
  // Another process with a small budget: it counts the 20 entries and
  // evicts down to its budget while it writes 20 more.
  const int64_t budget = 8 * EntryBytes();
  ASSERT_EQ(ExitCode(Spawn(Put(budget, 20, 20), out_)), 0);
  const DirUsage usage = Usage(dir_);
  EXPECT_LE(usage.bytes, budget);
  EXPECT_GT(usage.entries, 0);
  EXPECT_EQ(usage.temp_files, 0);
  // This process forgets what the other removed, at its next fetch.
  ASSERT_OK(store->FetchLongestPrefix(kModel, TokensOfKey(0)).status());
  EXPECT_EQ(store->entries(), usage.entries);
  EXPECT_EQ(store->bytes(), usage.bytes);
}

TEST_F(StoreSharingTest, ConcurrentWritersAndEvictionsServeOnlyExactEntries) {
  // Three processes put and fetch 60 keys for 3 s under a budget of about
  // 20 entries, so each evicts what the others wrote while they read it.
  const int64_t budget = 20 * EntryBytes();
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) pids.push_back(Spawn(Churn(budget, 10 + i, 3.0, 60), out_ + std::to_string(i)));
  int64_t foreign = 0, hits = 0;
  for (int i = 0; i < 3; ++i) {
    const int code = ExitCode(pids[i]);
    const std::string out = ReadText(out_ + std::to_string(i));
    ASSERT_EQ(code, 0) << "worker " << i << ": " << out;
    long long p = 0, f = 0, h = 0, x = 0;
    ASSERT_EQ(std::sscanf(out.c_str(), "puts %lld fetches %lld hits %lld foreign %lld", &p, &f, &h, &x), 4) << out;
    hits += h;
    foreign += x;
  }
  EXPECT_GT(hits, 0);
  EXPECT_GT(foreign, 0) << "no process was served an entry only another one wrote";
  // Each process stops within budget; entries still being written when
  // another evicted may add one entry per process.
  EXPECT_LE(Usage(dir_).bytes, budget + 3 * EntryBytes());
  EXPECT_EQ(Usage(dir_).temp_files, 0);
}

TEST_F(StoreSharingTest, AKilledProcessLeavesNothingTheOthersTripOn) {
  const int64_t budget = 20 * EntryBytes();
  const pid_t victim = Spawn(Churn(budget, 20, 30.0, 60), out_ + "v");
  const pid_t survivor = Spawn(Churn(budget, 21, 2.0, 60), out_ + "s");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  kill(victim, SIGKILL);
  EXPECT_EQ(ExitCode(victim), 128 + SIGKILL);
  ASSERT_EQ(ExitCode(survivor), 0) << ReadText(out_ + "s");
  // A process opening afterwards removes the dead one's temp files and
  // serves every entry exactly.
  StoreOpenReport report;
  auto store = PromptCacheStore::Open(Env::Default(), dir_, {.max_bytes = budget}, &report);
  ASSERT_OK(store);
  EXPECT_TRUE(report.dropped.empty()) << report.dropped.front();
  EXPECT_EQ(Usage(dir_).temp_files, 0);
  for (int64_t key = 0; key < 60; ++key) {
    const std::vector<int32_t> tokens = TokensOfKey(key);
    ASSERT_OK_AND_ASSIGN(auto hit, (*store)->FetchLongestPrefix(kModel, tokens));
    if (hit.has_value()) {
      EXPECT_TRUE(IsExactly(hit->cache, tokens, hit->length)) << "key " << key;
    }
  }
  ASSERT_EQ(ExitCode(Spawn(Churn(budget, 22, 0.5, 60), out_)), 0) << ReadText(out_);
}

}  // namespace
}  // namespace kvstore
