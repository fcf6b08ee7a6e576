// TaskPool and what runs on it (ParallelFor, OrderedPipeline, HashPipeline,
// the zstd writer, TaskQueue, the shared tier), on a busy pool and when the
// system refuses to start threads: every call completes (with less
// parallelism), nothing throws, nothing waits behind a busy pool.
#include "libkvstore/util/task_pool.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <latch>
#include <thread>

#include "kvstore/kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "kvstore/zstd_seekable.h"
#include "libkvstore/format/hash_pipeline.h"
#include "libkvstore/util/ordered_pipeline.h"
#include "libkvstore/util/platform_config.h"
#include "libkvstore/util/parallel.h"
#include "libkvstore/util/task_queue.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Iota;
using testing::Prefill;

TEST(TaskPoolTest, ParallelForRunsEveryItemAndReportsTheFirstError) {
  TaskPool pool(3);
  std::vector<std::atomic<int>> runs(1000);
  ASSERT_OK(pool.ParallelFor(runs.size(), 0, [&](size_t i) {
    ++runs[i];
    return Status::OK();
  }));
  for (const auto& r : runs) ASSERT_EQ(r.load(), 1);
  Status s = pool.ParallelFor(100, 4, [](size_t i) {
    return i == 17 || i == 60 ? Status::Corruption("item " + std::to_string(i)) : Status::OK();
  });
  EXPECT_THAT(s, testing::HasCode(StatusCode::kCorruption, "item 17"));
}

// Every worker blocked: a ParallelFor and a submitted call still finish on
// the calling thread.
TEST(TaskPoolTest, CallsCompleteWhileEveryWorkerIsBusy) {
  TaskPool pool(2);
  EXPECT_EQ(pool.workers(), 0);  // started as work arrives
  ASSERT_EQ(pool.StartWorkers(2), 2);
  std::latch release(1);
  std::vector<TaskPool::Pending<int>> blockers;
  for (int i = 0; i < 2; ++i) blockers.push_back(pool.Submit<int>([&] { return release.wait(), 0; }));
  // Released before the blockers are waited for, also when an assertion returns early.
  const std::unique_ptr<std::latch, void (*)(std::latch*)> unblock(&release, [](std::latch* l) { l->count_down(); });
  std::atomic<int> sum{0};
  ASSERT_OK(pool.ParallelFor(50, 3, [&](size_t i) {
    sum += static_cast<int>(i);
    return Status::OK();
  }));
  EXPECT_EQ(sum.load(), 49 * 50 / 2);
  const std::thread::id caller = std::this_thread::get_id();
  TaskPool::Pending<std::thread::id> ran = pool.Submit<std::thread::id>([] { return std::this_thread::get_id(); });
  EXPECT_EQ(ran.Get(), caller);
}

// ParallelFor and Submit from inside tasks of the same pool: the caller
// takes part at every level, so nesting never waits for a free worker.
TEST(TaskPoolTest, NestedCallsOnOnePoolComplete) {
  TaskPool pool(2);
  std::atomic<int> leaves{0};
  ASSERT_OK(pool.ParallelFor(6, 0, [&](size_t) {
    return pool.ParallelFor(6, 0, [&](size_t) {
      TaskPool::Pending<Status> inner = pool.Submit<Status>([&] {
        return pool.ParallelFor(6, 0, [&](size_t) { return ++leaves, Status::OK(); });
      });
      return inner.Get();
    });
  }));
  EXPECT_EQ(leaves.load(), 6 * 6 * 6);
}

// After a failure, items not yet started are skipped (they all come after
// it, so the first error by index is still the one returned).
TEST(TaskPoolTest, ParallelForSkipsItemsAfterAFailure) {
  TaskPool pool(1);
  std::latch release(1);
  TaskPool::Pending<int> blocker = pool.Submit<int>([&] { return release.wait(), 0; });
  std::atomic<int> ran{0};
  Status s = pool.ParallelFor(1000, 2, [&](size_t i) {
    ++ran;
    return i == 3 ? Status::Corruption("item 3") : Status::OK();
  });
  release.count_down();
  EXPECT_THAT(s, testing::HasCode(StatusCode::kCorruption, "item 3"));
  EXPECT_EQ(ran.load(), 4);  // the helper is queued behind the blocker: all ran here
  EXPECT_EQ(blocker.Get(), 0);
}

// Holds every worker of the shared pool while it lives.
class SharedPoolBlocked {
 public:
  SharedPoolBlocked()
      : workers_(TaskPool::Shared().StartWorkers(TaskPool::Shared().max_workers())), started_(workers_) {
    for (int i = 0; i < workers_; ++i) {
      blockers_.push_back(TaskPool::Shared().Submit<int>([this] { return started_.count_down(), release_.wait(), 0; }));
    }
    started_.wait();
  }
  ~SharedPoolBlocked() { release_.count_down(); }  // then the blockers are waited for

 private:
  const int workers_;
  std::latch started_;
  std::latch release_{1};
  std::vector<TaskPool::Pending<int>> blockers_;
};

// The users of the shared pool when no worker is free: the calling thread
// does the work (before, each started threads of its own).
TEST(TaskPoolTest, PipelinesCompleteWhileTheSharedPoolIsBusy) {
  SharedPoolBlocked busy;
  std::atomic<int> n{0};
  ASSERT_OK(ParallelFor(100, 0, [&](size_t) { return ++n, Status::OK(); }));
  EXPECT_EQ(n.load(), 100);

  std::vector<size_t> order;
  ASSERT_OK(OrderedPipeline<size_t>(
      20, 4, 3, [](size_t i) -> Result<size_t> { return i * 10; },
      [&](size_t i, size_t& item) { return order.push_back(item + i), Status::OK(); }));
  ASSERT_EQ(order.size(), 20u);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], 11 * i);

  // Over its byte budget at every array: the submitter hashes them itself.
  HashPipeline hasher(DigestAlgorithm::kSha256, 4, /*max_pending_bytes=*/64);
  std::vector<Array> arrays;
  for (int32_t i = 0; i < 50; ++i) arrays.push_back(Array::FromInt32s({i, i + 1, i + 2, i + 3}));
  for (size_t i = 0; i < arrays.size(); ++i) hasher.Submit(i, arrays[i]);
  const std::vector<Digest> digests = hasher.Finish();
  ASSERT_EQ(digests.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) EXPECT_EQ(digests[i], Sha256(arrays[i])) << i;

  std::unique_ptr<Env> env = NewMemEnv();
  auto file = env->NewWritableFile("/z").value();
  ZstdSeekableWriter writer(file.get(), {.frame_size = 4096, .threads = 0});
  std::vector<std::byte> content(100000);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<std::byte>(i % 251);
  ASSERT_OK(writer.Append(content));
  ASSERT_OK(writer.Finish());
  ASSERT_OK(file->Close());
  auto packed = env->OpenReadable("/z").value();
  ASSERT_OK_AND_ASSIGN(ZstdSeekableReader reader, ZstdSeekableReader::Open(packed->data()));
  std::vector<std::byte> back(content.size());
  ASSERT_OK(reader.ReadAll(back, 0));
  EXPECT_EQ(back, content);
}

// A child forked after the parent used the shared pool gets a fresh one:
// the parent's workers do not exist in it, so work queued for them would
// never run (a TaskQueue's Flush would wait forever).
TEST(TaskPoolTest, AForkedChildGetsAFreshSharedPool) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not follow fork() in a threaded process";
#endif
  ASSERT_GE(TaskPool::Shared().StartWorkers(1), 1);
  const pid_t pid = fork();
  if (pid == 0) {
    TaskPool& pool = TaskPool::Shared();
    if (pool.workers() != 0) _exit(2);
    std::atomic<int> ran{0};
    TaskQueue queue(pool, {.concurrency = 1});
    if (!queue.TryPush([&] { ++ran; })) _exit(3);
    queue.Flush();
    if (ran != 1) _exit(4);
    if (!ParallelFor(10, 0, [&](size_t) { return ++ran, Status::OK(); }).ok() || ran != 11) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Runs `body` in a child process whose address space leaves no room for a
// thread stack, so that starting a thread fails (as at RLIMIT_NPROC or a
// cgroup's pids limit; rlimits on processes do not bind root). The child's
// exit code is body's, 99 for an exception, 128 + N for signal N.
int WithoutThreads(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t now = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
    const rlimit limit{now + (rlim_t{6} << 20), now + (rlim_t{6} << 20)};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(90);
    // The C library reuses the stacks of threads that have ended: take
    // them all with threads that never end (they die with the child), until
    // a new one fails.
    static std::latch never(1);
    for (int started = 0;; ++started) {
      if (started == 64) _exit(91);  // the limit does not stop threads: the test would prove nothing
      try {
        std::thread([] { never.wait(); }).detach();
      } catch (const std::system_error&) {
        break;
      }
    }
    try {
      _exit(body());
    } catch (...) {
      _exit(99);  // an exception escaped the library
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#if !KVSTORE_HAVE_PROC_SELF
#define KVSTORE_SKIP_WITHOUT_THREADS() GTEST_SKIP() << "no /proc/self/statm to size RLIMIT_AS by"
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVSTORE_SKIP_WITHOUT_THREADS() GTEST_SKIP() << "sanitizers reserve address space beyond RLIMIT_AS"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define KVSTORE_SKIP_WITHOUT_THREADS() GTEST_SKIP() << "sanitizers reserve address space beyond RLIMIT_AS"
#endif
#endif
#ifndef KVSTORE_SKIP_WITHOUT_THREADS
#define KVSTORE_SKIP_WITHOUT_THREADS() (void)0
#endif

TEST(TaskPoolTest, WithoutThreadsEverythingRunsInline) {
  KVSTORE_SKIP_WITHOUT_THREADS();
  EXPECT_EQ(WithoutThreads([] {
              TaskPool pool(4);
              if (pool.StartWorkers(4) != 0) return 2;
              int sum = 0;
              if (!pool.ParallelFor(10, 4, [&](size_t i) { return sum += static_cast<int>(i), Status::OK(); }).ok()) {
                return 3;
              }
              if (sum != 45 || pool.Submit<int>([] { return 7; }).Get() != 7) return 4;
              std::atomic<int> n{0};
              if (!ParallelFor(10, 4, [&](size_t) { return ++n, Status::OK(); }).ok() || n != 10) return 5;
              // File conversions' produce-ahead pipeline: in order, on this thread.
              std::vector<size_t> order;
              Status piped = OrderedPipeline<size_t>(
                  6, 2, 3, [](size_t i) -> Result<size_t> { return i * 10; },
                  [&](size_t i, size_t& item) { return order.push_back(item + i), Status::OK(); });
              if (!piped.ok() || order != std::vector<size_t>{0, 11, 22, 33, 44, 55}) return 6;
              // The shared pool cannot start a worker either: a queue runs its
              // jobs on the thread that pushes them, hashing runs inline.
              std::atomic<int> ran{0};
              TaskQueue queue(TaskPool::Shared(), {.concurrency = 2});
              if (!queue.TryPush([&] { ++ran; }) || ran != 1) return 7;
              HashPipeline hasher(DigestAlgorithm::kSha256, 4, 1 << 20);
              const Array a = Array::FromInt32s({1, 2, 3});
              hasher.Submit(0, a);
              if (hasher.Finish() != std::vector<Digest>{Sha256(a)}) return 8;
              return 0;
            }),
            0);
}

// The shared tier opened, written (compressed, so the zstd writer too) and
// read where no thread can start: the same hit as with threads.
TEST(TaskPoolTest, TheSharedTierWorksWithoutThreads) {
  KVSTORE_SKIP_WITHOUT_THREADS();
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  PromptCache cache = {std::make_shared<KVCache>(), std::make_shared<KVCache>()};
  for (auto& layer : cache) Prefill(*layer, 40, 8, 5);
  const ModelFingerprint fp = testing::FingerprintOf(cache);
  const std::vector<int32_t> tokens = Iota(40);
  EXPECT_EQ(WithoutThreads([&] {
              SharedPromptCacheOptions options{.backend = backend.get(), .chunk_tokens = 8,
                                               .compression_level = 3, .async_insert = false,
                                               .max_batch_bytes = 4096};
              auto tier = SharedPromptCache::Open(options);
              if (!tier.ok()) return 2;
              if (!(*tier)->Insert(fp, tokens, cache).ok()) return 3;
              auto hit = (*tier)->Fetch(fp, tokens);
              if (!hit.ok() || !hit->has_value() || (*hit)->tokens != 40) return 4;
              options.async_insert = true;
              auto async = SharedPromptCache::Open(options);
              if (async.ok() || async.status().code() != StatusCode::kResourceExhausted) return 5;
              return 0;
            }),
            0);
}

// ServerPromptCache's disk writes where no thread can start: written on the
// inserting thread, before Insert returns.
TEST(TaskPoolTest, TheDiskTierIsWrittenWithoutThreads) {
  KVSTORE_SKIP_WITHOUT_THREADS();
  std::unique_ptr<Env> env = NewMemEnv();
  PromptCache cache = {std::make_shared<KVCache>()};
  Prefill(*cache[0], 40, 8, 5);
  const ModelFingerprint fp = testing::FingerprintOf(cache);
  const std::vector<int32_t> tokens = Iota(40);
  EXPECT_EQ(WithoutThreads([&] {
              auto store = PromptCacheStore::Open(env.get(), "/store", {});
              if (!store.ok()) return 2;
              ServerPromptCache server({.disk = store->get()});
              if (!server.Insert(fp, tokens, cache).ok()) return 3;
              return (*store)->entries() == 1 ? 0 : 4;
            }),
            0);
}

}  // namespace
}  // namespace kvstore
