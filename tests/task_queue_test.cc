// TaskQueue: bounded, at most `concurrency` jobs at once, in push order,
// queued jobs dropped and counted at Close, and run inline when the pool
// has no worker.
#include "libkvstore/util/task_queue.h"

#include <atomic>
#include <latch>
#include <mutex>
#include <vector>

#include "testutil.h"

namespace kvstore {
namespace {

TEST(TaskQueueTest, RunsJobsInPushOrderOneAtATime) {
  TaskPool pool(4);
  TaskQueue queue(pool, {.concurrency = 1});
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> running{0}, most{0};
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(queue.TryPush([&, i] {
      most = std::max(most.load(), ++running);
      {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(i);
      }
      --running;
    }));
  }
  queue.Flush();
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(queue.queued(), 0u);
}

TEST(TaskQueueTest, ConcurrencyBoundsTheJobsRunningAtOnce) {
  TaskPool pool(4);
  TaskQueue queue(pool, {.concurrency = 2});
  std::atomic<int> running{0}, most{0}, done{0};
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(queue.TryPush([&] {
      most = std::max(most.load(), ++running);
      std::this_thread::yield();
      --running;
      ++done;
    }));
  }
  queue.Flush();
  EXPECT_EQ(done.load(), 100);
  EXPECT_LE(most.load(), 2);
}

// A full queue refuses (the caller counts a drop); Close drops what has not
// started, waits for what has, and refuses from then on.
TEST(TaskQueueTest, CapacityAndClose) {
  TaskPool pool(1);
  TaskQueue queue(pool, {.capacity = 2, .concurrency = 1});
  std::latch started(1), release(1);
  std::atomic<int> ran{0};
  ASSERT_TRUE(queue.TryPush([&] {
    started.count_down();
    release.wait();
    ++ran;
  }));
  started.wait();  // running: no longer counts against the capacity
  EXPECT_TRUE(queue.TryPush([&] { ++ran; }));
  EXPECT_TRUE(queue.TryPush([&] { ++ran; }));
  EXPECT_FALSE(queue.TryPush([&] { ++ran; }));
  EXPECT_EQ(queue.queued(), 2u);
  std::thread closer([&] { EXPECT_EQ(queue.Close(), 2u); });
  while (queue.queued() != 0) std::this_thread::yield();  // dropped before the running job ends
  release.count_down();
  closer.join();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_FALSE(queue.TryPush([&] { ++ran; }));
  EXPECT_EQ(queue.Close(), 0u);
}

TEST(TaskQueueTest, RunOneRunsTheOldestJobHere) {
  TaskPool pool(1);
  std::latch release(1);
  TaskPool::Pending<int> blocker = pool.Submit<int>([&] { return release.wait(), 0; });
  TaskQueue queue(pool, {.concurrency = 1});
  std::vector<std::thread::id> ran_on;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(queue.TryPush([&] { ran_on.push_back(std::this_thread::get_id()); }));
  EXPECT_TRUE(queue.RunOne());  // the only worker is busy: the caller works
  EXPECT_TRUE(queue.RunOne());
  EXPECT_FALSE(queue.RunOne());
  ASSERT_EQ(ran_on.size(), 2u);
  EXPECT_EQ(ran_on[0], std::this_thread::get_id());
  release.count_down();
  EXPECT_EQ(blocker.Get(), 0);
  queue.Flush();
}

// A job that throws is dropped; the queue goes on.
TEST(TaskQueueTest, AJobThatThrowsDoesNotStopTheQueue) {
  TaskPool pool(2);
  TaskQueue queue(pool, {.concurrency = 1});
  std::atomic<int> ran{0};
  ASSERT_TRUE(queue.TryPush([] { throw std::runtime_error("job"); }));
  ASSERT_TRUE(queue.TryPush([&] { ++ran; }));
  queue.Flush();
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace kvstore
