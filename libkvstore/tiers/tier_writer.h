// TierWriter: a persistent tier's writes, off the request threads.
//
// Writes wait in a queue bounded by count and bytes and run in order, one
// at a time, on a worker of TaskPool::Shared(). A write whose key is already waiting replaces it (the
// newer cache supersedes the older; a tier keeps one entry per key). A
// write beyond the bounds (a write larger than the byte bound is queued
// only alone), or after Close(), is dropped and counted: the caller never
// waits for I/O. When the pool gets no thread, or with async off, writes
// run on the caller's thread.
//
// Thread safety: every member may be called from many threads.
#ifndef KVSTORE_LIBKVSTORE_TIERS_TIER_WRITER_H_
#define KVSTORE_LIBKVSTORE_TIERS_TIER_WRITER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "kvstore/status.h"
#include "libkvstore/util/task_pool.h"

namespace kvstore {

class TierWriter {
 public:
  struct Options {
    size_t max_pending = 16;
    int64_t max_bytes = int64_t{1} << 30;
    bool async = true;
  };
  explicit TierWriter(const Options& options);
  // Close(), then waits for the writer.
  ~TierWriter();
  TierWriter(const TierWriter&) = delete;
  TierWriter& operator=(const TierWriter&) = delete;

  // Queues `write` (of about `bytes` bytes) under `key`. OK when queued,
  // replacing a waiting write, or dropped (counted); when the write runs on
  // the caller's thread, its own status.
  Status Submit(std::string key, int64_t bytes, std::function<Status()> write);
  // Waits until every write queued so far has run.
  void Flush();
  // Flush(), then drops every later write. Idempotent.
  void Close();

  struct Stats {
    int64_t written = 0;        // writes that returned OK
    int64_t bytes_written = 0;  // their bytes, as given to Submit
    int64_t errors = 0;      // writes that failed
    int64_t dropped = 0;     // queue full, or closed
    int64_t superseded = 0;  // replaced by a newer write of the same key before they ran
    std::string last_error;
  };
  Stats stats() const;

 private:
  struct Job {
    std::string key;
    int64_t bytes = 0;
    std::function<Status()> write;
  };
  // Runs the queue until it is empty (on the pool's worker).
  void Drain();
  // Runs one write and counts its outcome. REQUIRES: mu_ not held.
  Status Run(Job job);

  const Options options_;
  TaskPool* pool_ = nullptr;  // TaskPool::Shared(); null in synchronous mode
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::deque<Job> queue_;     // guarded by mu_
  int64_t queued_bytes_ = 0;  // guarded by mu_
  bool draining_ = false;     // guarded by mu_: a drain task is queued or running
  bool closed_ = false;       // guarded by mu_
  Stats stats_;               // guarded by mu_
  TaskPool::Pending<int> drain_;  // guarded by mu_
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_TIER_WRITER_H_
