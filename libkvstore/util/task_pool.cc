#include "libkvstore/util/task_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <system_error>

namespace kvstore {

int DefaultThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

struct TaskPool::Task {
  std::function<void()> fn;
  std::atomic<bool> claimed{false};  // by a worker or by the waiter: the one that runs it
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;  // what fn threw, rethrown to the waiter as std::async would

  // Runs fn if nobody has claimed it; false when someone else has.
  bool TryRun() {
    if (claimed.exchange(true)) return false;
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    fn = nullptr;  // release its captures now
    {
      std::lock_guard<std::mutex> l(mu);
      done = true;
    }
    cv.notify_all();
    return true;
  }
};

namespace {

std::atomic<TaskPool*> shared_pool{nullptr};
// The parent's pool in a forked child: its workers did not survive the fork
// and its mutex may be held, so it is left alone (and kept reachable).
TaskPool* before_fork = nullptr;

void ForgetPoolAfterFork() {
  before_fork = shared_pool.exchange(nullptr);
}

}  // namespace

TaskPool& TaskPool::Shared() {
  TaskPool* pool = shared_pool.load(std::memory_order_acquire);
  if (pool != nullptr) return *pool;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, ForgetPoolAfterFork); });
  // A pool starts no thread until work arrives: a losing racer's is cheap.
  auto fresh = std::make_unique<TaskPool>(0);
  if (shared_pool.compare_exchange_strong(pool, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *pool;
}

TaskPool::TaskPool(int max_workers) : max_workers_(max_workers > 0 ? max_workers : DefaultThreads()) {}

TaskPool::~TaskPool() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    workers.swap(workers_);
  }
  ready_.notify_all();
  for (std::thread& t : workers) t.join();
}

int TaskPool::workers() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(workers_.size());
}

bool TaskPool::StartWorkerLocked() {
  try {
    workers_.emplace_back([this] { WorkerLoop(); });
    return true;
  } catch (const std::system_error&) {
    return false;  // run with the workers we have
  }
}

int TaskPool::StartWorkers(int n) {
  std::lock_guard<std::mutex> l(mu_);
  while (static_cast<int>(workers_.size()) < std::min(n, max_workers_) && StartWorkerLocked()) {
  }
  return static_cast<int>(workers_.size());
}

void TaskPool::WorkerLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    ++idle_;
    ready_.wait(l, [&] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping and drained
    std::shared_ptr<Task> task = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    task->TryRun();  // a no-op when its waiter already ran it
    task.reset();
    l.lock();
  }
}

bool TaskPool::Enqueue(std::shared_ptr<Task> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    // A worker for every task that no idle one will take.
    if (queue_.size() >= static_cast<size_t>(idle_) && static_cast<int>(workers_.size()) < max_workers_) {
      StartWorkerLocked();
    }
    if (workers_.empty()) return false;
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
  return true;
}

std::shared_ptr<TaskPool::Task> TaskPool::Post(std::function<void()> fn) {
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  (void)Enqueue(task);  // not queued: its waiter runs it
  return task;
}

bool TaskPool::TrySchedule(std::function<void()> fn) {
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  return Enqueue(std::move(task));
}

std::exception_ptr TaskPool::RunOrWait(Task& task) {
  if (!task.TryRun()) {
    std::unique_lock<std::mutex> l(task.mu);
    task.cv.wait(l, [&] { return task.done; });
  }
  return std::exchange(task.error, nullptr);
}

Status TaskPool::ParallelFor(size_t n, int parallelism, const std::function<Status(size_t)>& fn) {
  if (parallelism <= 0) parallelism = DefaultThreads();
  const size_t helpers = n == 0 ? 0
                                : std::min({static_cast<size_t>(parallelism - 1),
                                            static_cast<size_t>(max_workers_), n - 1});
  if (helpers == 0) {
    for (size_t i = 0; i < n; ++i) KV_RETURN_IF_ERROR(fn(i));
    return Status::OK();
  }
  // Shared with the helpers, which may start after this call has returned.
  struct State {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    size_t n = 0;
    const std::function<Status(size_t)>* fn = nullptr;
    std::vector<Status> results;
    std::mutex mu;
    std::condition_variable cv;
    size_t finished = 0;  // items claimed and done, or skipped
  };
  auto state = std::make_shared<State>();
  state->n = n;
  state->fn = &fn;
  state->results.resize(n);
  // An item is claimed before fn is touched, and this call returns only
  // once every item has finished, so a late helper never sees fn. Items are
  // claimed in increasing order, so after a failure the skipped ones all
  // come after it and the first error by index is still found.
  auto work = [state] {
    for (size_t i = state->next.fetch_add(1); i < state->n; i = state->next.fetch_add(1)) {
      Status s;
      if (!state->failed.load(std::memory_order_relaxed)) {
        try {
          s = (*state->fn)(i);
        } catch (const std::exception& e) {
          s = Status::ResourceExhausted(std::string("parallel task: ") + e.what());
        }
        if (!s.ok()) state->failed = true;
      }
      std::lock_guard<std::mutex> l(state->mu);
      state->results[i] = std::move(s);
      if (++state->finished == state->n) state->cv.notify_all();
    }
  };
  for (size_t h = 0; h < helpers; ++h) {
    if (!TrySchedule(work)) break;
  }
  work();
  std::unique_lock<std::mutex> l(state->mu);
  state->cv.wait(l, [&] { return state->finished == state->n; });
  for (const Status& s : state->results) {
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace kvstore
