// The POSIX Env's replacing rename (RENAME_EXCHANGE, then an unlink whose
// teardown runs on the pool) under hostile conditions: a name given twice,
// something raced into the target's place, a swap-back that fails, a signal
// handler in the middle, concurrent writers and readers, a busy pool, a fork.
// Without renameat2 (macOS, KVSTORE_PORTABLE) RenameFile is rename(2): the
// tests that act inside the exchange skip, the others run.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "env_test_util.h"
#include "kvstore/env.h"
#include "libkvstore/util/platform_config.h"
#include "libkvstore/util/task_pool.h"
#include "testutil.h"

namespace {

// Runs before each renameat2 call with RENAME_EXCHANGE (its 0-based number
// since the hook was set) and after it, with its result; null: none.
std::function<void(int call, bool after)> exchange_hook;
int exchange_calls = 0;

}  // namespace

#if KVSTORE_HAVE_RENAME_EXCHANGE
#include <sys/syscall.h>

// The library's renameat2 calls land here (this executable links the library
// statically), so a test can act between the steps of one RenameFile: what
// another process might do in that instant. Without a hook it is the system
// call itself.
extern "C" int renameat2(int olddirfd, const char* oldpath, int newdirfd, const char* newpath,
                         unsigned int flags) noexcept {
  const bool hooked = exchange_hook && (flags & RENAME_EXCHANGE) != 0;
  const int call = hooked ? exchange_calls++ : 0;
  if (hooked) exchange_hook(call, /*after=*/false);
  const int result = static_cast<int>(syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags));
  const int err = errno;
  if (hooked) exchange_hook(call, /*after=*/true);
  errno = err;
  return result;
}
#define KVSTORE_SKIP_WITHOUT_EXCHANGE() (void)0
#else
#define KVSTORE_SKIP_WITHOUT_EXCHANGE() \
  GTEST_SKIP() << "built without renameat2(RENAME_EXCHANGE): RenameFile is rename(2), with no step to act between"
#endif

namespace kvstore::testing {
namespace {

class ExchangeHook {
 public:
  explicit ExchangeHook(std::function<void(int, bool)> hook) {
    exchange_calls = 0;
    exchange_hook = std::move(hook);
  }
  ~ExchangeHook() { exchange_hook = nullptr; }
  ExchangeHook(const ExchangeHook&) = delete;
  ExchangeHook& operator=(const ExchangeHook&) = delete;
};

mode_t FileType(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_mode & S_IFMT : 0;
}

int OpenDescriptors() { return static_cast<int>(OpenDescriptorList().size()); }

// rename(2) of a file onto itself, under one spelling or two, or onto
// another hard link of it, does nothing; so does RenameFile.
TEST(PosixReplaceTest, RenameOntoTheSameFileKeepsIt) {
  TempDir tmp;
  Env* env = Env::Default();
  const std::string path = tmp.Join("f"), link_name = tmp.Join("g");
  ASSERT_OK(WriteString(env, path, "kept"));
  ASSERT_OK(env->RenameFile(path, path));
  EXPECT_EQ(ReadString(env, path).value(), "kept");
  ASSERT_OK(env->RenameFile(tmp.path() + "/./f", path));
  EXPECT_EQ(ReadString(env, path).value(), "kept");
  ASSERT_EQ(link(path.c_str(), link_name.c_str()), 0);
  ASSERT_OK(env->RenameFile(link_name, path));
  EXPECT_EQ(ReadString(env, path).value(), "kept");
  EXPECT_EQ(ReadString(env, link_name).value(), "kept");
}

// A FIFO or a symbolic link that takes the target's place between
// WriteFileAtomic's check and its rename is refused and left there; the
// file the link leads to is untouched, and no temp file remains.
TEST(PosixReplaceTest, WriteRefusesWhatRacedIntoTheTargetsPlace) {
  KVSTORE_SKIP_WITHOUT_EXCHANGE();
  TempDir tmp;
  Env* env = Env::Default();
  const std::string path = tmp.Join("out"), elsewhere = tmp.Join("elsewhere");
  ASSERT_OK(WriteString(env, elsewhere, "not ours"));
  for (const bool fifo : {true, false}) {
    SCOPED_TRACE(fifo ? "FIFO" : "symbolic link");
    ASSERT_OK(WriteString(env, path, "old"));
    ExchangeHook hook([&](int call, bool after) {
      if (call != 0 || after) return;
      unlink(path.c_str());
      ASSERT_EQ(fifo ? mkfifo(path.c_str(), 0644) : symlink(elsewhere.c_str(), path.c_str()), 0);
    });
    EXPECT_THAT(WriteStringAtomic(env, path, AsBytes("new")),
                HasCode(StatusCode::kIOError, path + ": not a regular file"));
    EXPECT_EQ(FileType(path), fifo ? S_IFIFO : S_IFLNK);
    EXPECT_EQ(ReadString(env, elsewhere).value(), "not ours");
    EXPECT_THAT(env->GetChildren(tmp.path()).value(), ::testing::UnorderedElementsAre("out", "elsewhere"));
    ASSERT_EQ(unlink(path.c_str()), 0);
  }
}

// The swap-back fails when the new file is removed from the target's name
// in that instant: the FIFO that raced in is still put back, not left under
// the temp file's name for WriteFileAtomic to remove.
TEST(PosixReplaceTest, AFailedSwapBackStillPutsBackWhatRacedIn) {
  KVSTORE_SKIP_WITHOUT_EXCHANGE();
  TempDir tmp;
  Env* env = Env::Default();
  const std::string path = tmp.Join("out");
  ASSERT_OK(WriteString(env, path, "old"));
  ExchangeHook hook([&](int call, bool after) {
    if (after) return;
    if (call == 0) {
      unlink(path.c_str());
      ASSERT_EQ(mkfifo(path.c_str(), 0644), 0);
    } else {
      unlink(path.c_str());  // the new file, gone: the swap-back fails
    }
  });
  EXPECT_THAT(WriteStringAtomic(env, path, AsBytes("new")),
              HasCode(StatusCode::kIOError, path + ": not a regular file (FIFO)"));
  EXPECT_EQ(FileType(path), S_IFIFO);
  EXPECT_THAT(env->GetChildren(tmp.path()).value(), ::testing::ElementsAre("out"));
}

// A signal handler that removes the temp files in progress between the
// exchange and the unlink removes the old file (now under the temp name):
// the target holds the new bytes and nothing else is left.
TEST(PosixReplaceTest, SignalCleanupBetweenExchangeAndUnlink) {
  KVSTORE_SKIP_WITHOUT_EXCHANGE();
  TempDir tmp;
  Env* env = Env::Default();
  const std::string path = tmp.Join("out");
  ASSERT_OK(WriteString(env, path, "old"));
  int removed = -1;
  ExchangeHook hook([&](int call, bool after) {
    if (call == 0 && after) removed = RemoveTempFilesInProgress();
  });
  ASSERT_OK(WriteStringAtomic(env, path, AsBytes("new")));
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(ReadString(env, path).value(), "new");
  EXPECT_THAT(env->GetChildren(tmp.path()).value(), ::testing::ElementsAre("out"));
}

// Two threads replacing one path while a third maps it: every write
// succeeds, every read sees one whole version, and no temp file is left.
TEST(PosixReplaceTest, ConcurrentReplacementsOfOnePath) {
  TempDir tmp;
  Env* env = Env::Default();
  const std::string path = tmp.Join("out");
  const std::string a(4096, 'a'), b(8192, 'b');
  ASSERT_OK(WriteStringAtomic(env, path, AsBytes(a)));
  std::atomic<bool> done{false};
  std::atomic<int> bad_reads{0}, reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      Result<std::string> got = ReadString(env, path);
      ++reads;
      if (!got.ok() || (*got != a && *got != b)) ++bad_reads;
    }
  });
  std::vector<Status> failures;
  std::mutex mu;
  auto writer = [&](const std::string& content) {
    for (int i = 0; i < 200; ++i) {
      if (Status s = WriteStringAtomic(env, path, AsBytes(content)); !s.ok()) {
        std::lock_guard<std::mutex> l(mu);
        failures.push_back(s);
      }
    }
  };
  std::thread wa(writer, a), wb(writer, b);
  wa.join();
  wb.join();
  done = true;
  reader.join();
  EXPECT_TRUE(failures.empty()) << failures.front().ToString();
  EXPECT_EQ(bad_reads.load(), 0) << "of " << reads.load();
  const std::string last = ReadString(env, path).value();
  EXPECT_TRUE(last == a || last == b);
  EXPECT_THAT(env->GetChildren(tmp.path()).value(), ::testing::ElementsAre("out"));
}

// Holds every worker of the shared pool busy until destroyed.
class BusyPool {
 public:
  BusyPool() {
    TaskPool& pool = TaskPool::Shared();
    for (int i = 0; i < pool.max_workers(); ++i) {
      if (!pool.TrySchedule([this] {
            std::unique_lock<std::mutex> l(mu_);
            ++blocked_;
            cv_.notify_all();
            cv_.wait(l, [&] { return release_; });
            ++finished_;
            cv_.notify_all();
          })) {
        break;
      }
      ++scheduled_;
    }
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return blocked_ == scheduled_; });
  }
  ~BusyPool() {
    std::unique_lock<std::mutex> l(mu_);
    release_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return finished_ == scheduled_; });
  }
  BusyPool(const BusyPool&) = delete;
  BusyPool& operator=(const BusyPool&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool release_ = false;
  int scheduled_ = 0, blocked_ = 0, finished_ = 0;
};

// With every pool worker busy, removed files' descriptors wait for a
// worker; they must not pile up without bound (each is a descriptor of the
// process's limit, and the file's blocks stay allocated), and they are all
// closed once the workers are free.
TEST(PosixReplaceTest, DeferredClosesDoNotPileUpBehindABusyPool) {
  TempDir tmp;
  Env* env = Env::Default();
  constexpr int kFiles = 300;
  for (int i = 0; i < kFiles; ++i) ASSERT_OK(WriteString(env, tmp.Join(std::to_string(i)), "x"));
  const int before = OpenDescriptors();
  int pending = 0;
  {
    BusyPool busy;
    for (int i = 0; i < kFiles; ++i) EXPECT_OK(env->RemoveFile(tmp.Join(std::to_string(i))));
    pending = OpenDescriptors() - before;
  }
  EXPECT_GT(pending, 0);  // the closes did wait for the workers
  EXPECT_LE(pending, 64);
  for (int wait = 0; wait < 500 && OpenDescriptors() > before; ++wait) usleep(10'000);
  EXPECT_EQ(OpenDescriptors(), before);
}

// A child of fork() inherits the descriptors still waiting for a worker,
// but not the queue of the workers that would close them: it closes them
// at once, so it does not keep the removed files' blocks for as long as it
// runs.
TEST(PosixReplaceTest, AForkedChildClosesTheDescriptorsWaitingForWorkers) {
  TempDir tmp;
  Env* env = Env::Default();
  constexpr int kFiles = 8;
  for (int i = 0; i < kFiles; ++i) ASSERT_OK(WriteString(env, tmp.Join(std::to_string(i)), "x"));
  {
    BusyPool busy;
    for (int i = 0; i < kFiles; ++i) EXPECT_OK(env->RemoveFile(tmp.Join(std::to_string(i))));
    EXPECT_EQ(DescriptorsOfRemovedFiles(tmp.path()), kFiles);  // waiting here
    const pid_t pid = fork();
    if (pid == 0) _exit(DescriptorsOfRemovedFiles(tmp.path()));
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "descriptors of removed files left open in the child";
  }
  for (int wait = 0; wait < 500 && DescriptorsOfRemovedFiles(tmp.path()) > 0; ++wait) usleep(10'000);
  EXPECT_EQ(DescriptorsOfRemovedFiles(tmp.path()), 0);
}

}  // namespace
}  // namespace kvstore::testing
