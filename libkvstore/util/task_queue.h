// TaskQueue: a bounded queue of background jobs run on a TaskPool, by at
// most `concurrency` workers at a time, oldest first. For writers behind a
// request path: TryPush never waits (a full queue refuses the job, so the
// caller can count a drop), and closing the queue drops what has not
// started.
//
//   TaskQueue writes(TaskPool::Shared(), {.capacity = 64, .concurrency = 1});
//   // Optional: refuse to run without a worker (else TryPush may run jobs inline).
//   if (TaskPool::Shared().StartWorkers(1) == 0) return Status::ResourceExhausted(...);
//   if (!writes.TryPush([job = std::move(job)] { Write(job); })) ++dropped;
//   writes.Flush();  // waits until no job is queued or running
//   // ~TaskQueue (or Close()): drops the queued jobs, waits for the running ones
//
// Jobs run on pool workers and may use the pool themselves (ParallelFor,
// Submit). With concurrency 1 they run one after the other in push order,
// unless someone calls RunOne. A job is a std::function (its captures must
// be copyable: hold move-only state in a shared_ptr) and must not throw (an
// exception is dropped). If the pool cannot run a job at all (no worker can be
// started), TryPush runs the queue on the calling thread before it returns.
//
// Thread safety: every member may be called from many threads at once.
// REQUIRES: Flush and Close are not called from one of this queue's jobs
// (they would wait for themselves).
#ifndef KVSTORE_LIBKVSTORE_UTIL_TASK_QUEUE_H_
#define KVSTORE_LIBKVSTORE_UTIL_TASK_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "libkvstore/util/task_pool.h"

namespace kvstore {

class TaskQueue {
 public:
  struct Options {
    size_t capacity = SIZE_MAX;  // queued jobs (not counting running ones)
    int concurrency = 1;         // workers running this queue's jobs at once
  };

  // `pool` must outlive the queue.
  TaskQueue(TaskPool& pool, Options options);
  ~TaskQueue() { (void)Close(); }
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  // Queues `job`; false (job dropped) when `capacity` jobs are queued or the
  // queue is closed.
  bool TryPush(std::function<void()> job);
  // Runs the oldest queued job on the calling thread, whatever the
  // concurrency; false when none is queued. For an owner that would rather
  // work than wait (a producer over its budget).
  bool RunOne();
  // Waits until no job is queued or running.
  void Flush();
  // Refuses new jobs, drops the queued ones and waits for the running ones;
  // returns how many were dropped. Idempotent.
  size_t Close();
  // Jobs queued and not started.
  size_t queued() const;

 private:
  struct State;  // shared with the drains on the pool, which may outlive the queue
  TaskPool& pool_;
  std::shared_ptr<State> state_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_TASK_QUEUE_H_
