#include "libkvstore/util/task_pool.h"

#include <algorithm>
#include <atomic>
#include <system_error>

#include "libkvstore/util/parallel.h"

namespace kvstore {

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

TaskPool::TaskPool(int threads) {
  if (threads <= 0) threads = DefaultThreads();
  for (int i = 0; i < threads; ++i) {
    try {
      workers_.emplace_back([this] { WorkerLoop(); });
    } catch (const std::system_error&) {
      break;  // run with the workers we have
    }
  }
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void TaskPool::WorkerLoop() {
  while (true) {
    std::unique_lock<std::mutex> l(mu_);
    ready_.wait(l, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::shared_ptr<Task> task = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    task->TryRun();  // a no-op when its waiter already ran it
  }
}

std::shared_ptr<TaskPool::Task> TaskPool::Post(std::function<void()> fn) {
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  if (workers_.empty()) return task;  // its waiter runs it
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(task);
  }
  ready_.notify_one();
  return task;
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
  const size_t helpers =
      n == 0 ? 0 : std::min({static_cast<size_t>(parallelism - 1), static_cast<size_t>(workers()), n - 1});
  // Shared with the helpers, which may start after this call has returned.
  struct State {
    std::atomic<size_t> next{0};
    size_t n = 0;
    const std::function<Status(size_t)>* fn = nullptr;
    std::vector<Status> results;
    std::mutex mu;
    std::condition_variable cv;
    size_t finished = 0;
  };
  auto state = std::make_shared<State>();
  state->n = n;
  state->fn = &fn;
  state->results.resize(n);
  // An item is claimed before fn is touched, and this call returns only
  // once every item has finished, so a late helper never sees fn.
  auto work = [state] {
    for (size_t i = state->next.fetch_add(1); i < state->n; i = state->next.fetch_add(1)) {
      Status s;
      try {
        s = (*state->fn)(i);
      } catch (const std::exception& e) {
        s = Status::ResourceExhausted(std::string("parallel task: ") + e.what());
      }
      std::lock_guard<std::mutex> l(state->mu);
      state->results[i] = std::move(s);
      if (++state->finished == state->n) state->cv.notify_all();
    }
  };
  for (size_t h = 0; h < helpers; ++h) (void)Post(work);
  work();
  std::unique_lock<std::mutex> l(state->mu);
  state->cv.wait(l, [&] { return state->finished == state->n; });
  for (const Status& s : state->results) {
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace kvstore
