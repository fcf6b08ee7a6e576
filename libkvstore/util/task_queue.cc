#include "libkvstore/util/task_queue.h"

#include <condition_variable>
#include <deque>
#include <mutex>

namespace kvstore {

struct TaskQueue::State {
  const Options options;
  std::mutex mu;
  std::condition_variable idle;  // a job finished
  std::deque<std::function<void()>> jobs;
  int drains = 0;    // drains scheduled on the pool and not yet ended
  int running = 0;   // jobs running (on drains or in RunOne)
  bool closed = false;

  explicit State(Options o) : options(o) {}

  // Runs the oldest job; REQUIRES: `l` holds mu and a job is queued.
  void RunFront(std::unique_lock<std::mutex>& l) {
    std::function<void()> job = std::move(jobs.front());
    jobs.pop_front();
    ++running;
    l.unlock();
    try {
      job();
    } catch (...) {
      // A job must not throw; nobody is there to tell.
    }
    job = nullptr;  // release its captures before reporting progress
    l.lock();
    --running;
    idle.notify_all();
  }

  // A drain: runs jobs until none is queued.
  static void Drain(const std::shared_ptr<State>& state) {
    std::unique_lock<std::mutex> l(state->mu);
    while (!state->jobs.empty()) state->RunFront(l);
    --state->drains;
  }
};

TaskQueue::TaskQueue(TaskPool& pool, Options options)
    : pool_(pool), state_(std::make_shared<State>(options)) {}

bool TaskQueue::TryPush(std::function<void()> job) {
  std::unique_lock<std::mutex> l(state_->mu);
  if (state_->closed || state_->jobs.size() >= state_->options.capacity) return false;
  state_->jobs.push_back(std::move(job));
  if (state_->drains >= state_->options.concurrency) return true;  // a drain will take it
  ++state_->drains;
  l.unlock();
  if (!pool_.TrySchedule([state = state_] { State::Drain(state); })) {
    State::Drain(state_);  // no worker at all: run it here
  }
  return true;
}

bool TaskQueue::RunOne() {
  std::unique_lock<std::mutex> l(state_->mu);
  if (state_->jobs.empty()) return false;
  state_->RunFront(l);
  return true;
}

void TaskQueue::Flush() {
  std::unique_lock<std::mutex> l(state_->mu);
  state_->idle.wait(l, [&] { return state_->jobs.empty() && state_->running == 0; });
}

size_t TaskQueue::Close() {
  std::unique_lock<std::mutex> l(state_->mu);
  std::deque<std::function<void()>> dropped;
  dropped.swap(state_->jobs);
  state_->closed = true;
  state_->idle.notify_all();  // a Flush waiting for the dropped jobs
  state_->idle.wait(l, [&] { return state_->running == 0; });
  l.unlock();
  return dropped.size();  // their captures are released here, outside the lock
}

size_t TaskQueue::queued() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->jobs.size();
}

}  // namespace kvstore
