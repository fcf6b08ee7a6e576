// TaskPool: a fixed set of worker threads, started once, for work that
// would otherwise start threads on every call (the shared tier's fetches
// and inserts).
//
// Starting a thread can fail (RLIMIT_NPROC, address space, cgroup pids).
// The pool never throws for it: it runs with the workers it got, possibly
// none, and a task no worker has started yet is run by the thread that
// waits for it. So every call completes, with less parallelism when
// threads are short, and nothing waits on a queue behind a busy pool.
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

class TaskPool {
 public:
  struct Task;  // one queued call (task_pool.cc)

  // Starts up to `threads` workers (0: one per core); fewer when the
  // system refuses to start more.
  explicit TaskPool(int threads);
  // Runs what is queued, then joins the workers.
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  int workers() const { return static_cast<int>(workers_.size()); }

  // fn(i) for every i in [0, n), on the calling thread and up to
  // `parallelism` - 1 workers (0: one per core); the first error by index.
  // A worker that gets to its share late finds nothing left: the caller
  // never waits for a task that has not started.
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

 private:
  // Queues `fn` for a worker (not when there is none) and returns its task.
  std::shared_ptr<Task> Post(std::function<void()> fn);
  // Runs the task here unless a worker has claimed it; then waits for it.
  // Returns (and clears) what the task threw, if anything.
  static std::exception_ptr RunOrWait(Task& task);
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_TASK_POOL_H_
