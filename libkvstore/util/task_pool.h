// TaskPool: the library's one source of threads. Parallel loops
// (ParallelFor), the ordered pipeline, hashing, compression and background
// queues (task_queue.h) all run on a pool, normally the process-wide
// TaskPool::Shared(); nothing else in libkvstore/ starts a thread.
//
// Workers start when work is queued and none is idle, up to the pool's
// size, and then stay. Starting a thread can fail (RLIMIT_NPROC, address
// space, cgroup pids): the pool never throws for it, it runs with the
// workers it got, possibly none, and work that no worker has started is
// run by the thread that waits for it. So every call completes, with less
// parallelism when threads are short, and nothing waits on a queue behind a
// busy pool. That also makes nesting safe: a task may itself call
// ParallelFor or Submit on the pool it runs on.
//
// What to use:
// - ParallelFor(n, parallelism, fn): a loop; the calling thread takes part.
// - Submit(fn) -> Pending<T>: one call in the background while the caller
//   goes on; Get() waits, or runs fn itself if no worker has started it.
// - TaskQueue (task_queue.h): a bounded queue of jobs nobody waits for
//   one by one (asynchronous writers).
// - TrySchedule(fn): the primitive under those, for code that keeps its
//   own state (ordered_pipeline.h, format/hash_pipeline.cc).
//
// Thread safety: every member may be called from many threads at once.
#ifndef KVSTORE_LIBKVSTORE_UTIL_TASK_POOL_H_
#define KVSTORE_LIBKVSTORE_UTIL_TASK_POOL_H_

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kvstore/status.h"

namespace kvstore {

// Cores the system reports (at least 1): the size of the shared pool and
// what `threads` = 0 means everywhere.
int DefaultThreads();

class TaskPool {
 public:
  struct Task;  // one queued call (task_pool.cc)

  // A pool of up to `max_workers` threads (0: DefaultThreads()), none
  // started yet.
  explicit TaskPool(int max_workers);
  // Runs what is queued, then joins the workers.
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // The process-wide pool (DefaultThreads() workers), created on first use
  // and never destroyed; the child of a fork() gets a fresh one.
  static TaskPool& Shared();

  int max_workers() const { return max_workers_; }
  // Workers started so far.
  int workers() const;
  // Starts workers until `n` run (at most max_workers()); returns how many
  // run, fewer when the system refuses threads.
  int StartWorkers(int n);

  // fn(i) for every i in [0, n), on the calling thread and up to
  // `parallelism` - 1 workers (0: DefaultThreads(); never more than
  // max_workers()). Returns the first error by index; once an item fails,
  // items not yet started are skipped (they come after it). A worker that
  // gets to its share late finds nothing left: the caller never waits for
  // an item that has not started. An exception from fn becomes
  // ResourceExhausted.
  Status ParallelFor(size_t n, int parallelism, const std::function<Status(size_t)>& fn);

  // A call of fn() on a worker, or on the waiting thread if no worker has
  // started it by then. Get() and the destructor wait for it.
  template <typename T>
  class Pending {
   public:
    Pending() = default;
    Pending(Pending&&) = default;
    Pending& operator=(Pending&& other) {
      Wait(/*rethrow=*/false);
      task_ = std::move(other.task_);
      result_ = std::move(other.result_);
      return *this;
    }
    // Waits; an exception of a task nobody asked for is dropped (a
    // destructor must not throw: the shared tier abandons read-ahead).
    ~Pending() { Wait(/*rethrow=*/false); }
    bool valid() const { return task_ != nullptr; }
    // REQUIRES: valid(). Once.
    T Get() {
      Wait(/*rethrow=*/true);
      T out = std::move(**result_);
      result_.reset();
      return out;
    }

   private:
    friend class TaskPool;
    void Wait(bool rethrow) {
      std::exception_ptr error;
      if (task_ != nullptr) error = TaskPool::RunOrWait(*task_);
      task_.reset();
      if (error && rethrow) std::rethrow_exception(error);
    }
    std::shared_ptr<Task> task_;
    std::shared_ptr<std::optional<T>> result_;
  };

  // When T holds a Status (Status, Result<U>), an exception thrown by fn
  // (std::bad_alloc building a batch) becomes an error value, so nothing
  // is thrown through the library's API.
  template <typename T>
  Pending<T> Submit(std::function<T()> fn) {
    Pending<T> out;
    out.result_ = std::make_shared<std::optional<T>>();
    out.task_ = Post([fn = std::move(fn), result = out.result_] {
      if constexpr (std::is_constructible_v<T, Status>) {
        try {
          result->emplace(fn());
        } catch (const std::exception& e) {
          result->emplace(Status::ResourceExhausted(std::string("task: ") + e.what()));
        }
      } else {
        result->emplace(fn());
      }
    });
    return out;
  }

  // Queues fn for a worker and returns true, or returns false (fn dropped)
  // when no worker runs or can be started: the caller then does the work
  // itself. Nobody waits for fn, so it must keep what it touches alive
  // (a shared_ptr to its state) and catch what it throws (an exception is
  // dropped).
  bool TrySchedule(std::function<void()> fn);

 private:
  // Queues the task for a worker; false when there is none to run it.
  bool Enqueue(std::shared_ptr<Task> task);
  // Queues `fn` for a worker (not when there is none) and returns its task.
  std::shared_ptr<Task> Post(std::function<void()> fn);
  // Runs the task here unless a worker has claimed it; then waits for it.
  // Returns (and clears) what the task threw, if anything.
  static std::exception_ptr RunOrWait(Task& task);
  // With mu_ held: starts one worker; false when the system refuses.
  bool StartWorkerLocked();
  void WorkerLoop();

  const int max_workers_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Task>> queue_;
  int idle_ = 0;  // workers waiting for a task
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_TASK_POOL_H_
