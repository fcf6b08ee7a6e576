#include "libkvstore/tiers/tier_writer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <optional>
#include <utility>

#include "libkvstore/util/platform_config.h"
#if KVSTORE_HAVE_THREAD_NICE
#include <sys/syscall.h>
#endif

namespace kvstore {
namespace {

#if KVSTORE_HAVE_THREAD_NICE
// Lowers the calling thread's CPU priority for its lifetime (Linux: nice
// is per thread), so that a background write never takes a core from a
// request thread. The thread is a worker of the library's shared pool, so
// it is lowered only where it can be raised back afterwards (root, or an
// RLIMIT_NICE that allows the old value): otherwise the write runs at the
// worker's priority rather than leave a shared worker lowered for good.
class BackgroundPriority {
 public:
  BackgroundPriority() : tid_(static_cast<id_t>(syscall(SYS_gettid))) {
    errno = 0;
    const int now = getpriority(PRIO_PROCESS, tid_);
    if (errno != 0 || !CanRaiseBackTo(now)) return;
    if (setpriority(PRIO_PROCESS, tid_, std::min(now + kLower, 19)) == 0) old_ = now;
  }
  ~BackgroundPriority() {
    if (old_) (void)setpriority(PRIO_PROCESS, tid_, *old_);
  }
  BackgroundPriority(const BackgroundPriority&) = delete;
  BackgroundPriority& operator=(const BackgroundPriority&) = delete;

 private:
  static bool CanRaiseBackTo(int nice) {
    if (geteuid() == 0) return true;
    struct rlimit limit;
    if (getrlimit(RLIMIT_NICE, &limit) != 0) return false;
    // RLIMIT_NICE r allows a nice value down to 20 - r.
    return limit.rlim_cur == RLIM_INFINITY || 20 - static_cast<int64_t>(limit.rlim_cur) <= nice;
  }
  static constexpr int kLower = 10;
  id_t tid_;
  std::optional<int> old_;
};
#else
// Elsewhere nice is per process (POSIX): one pool worker cannot be lowered
// alone, and the write runs at the worker's priority.
class BackgroundPriority {
 public:
  BackgroundPriority() {}  // user-provided: `const BackgroundPriority p;` is well formed and used
};
#endif

}  // namespace

TierWriter::TierWriter(const Options& options) : options_(options) {
  if (options_.async) pool_ = &TaskPool::Shared();
}

TierWriter::~TierWriter() {
  Close();
  TaskPool::Pending<int> drain;
  {
    std::lock_guard<std::mutex> l(mu_);
    drain = std::move(drain_);
  }
}  // waits for the drain task

Status TierWriter::Run(Job job) {
  Status s;
  try {
    s = job.write();
  } catch (const std::exception& e) {
    s = Status::ResourceExhausted(std::string("tier write: ") + e.what());
  }
  const int64_t bytes = job.bytes;
  job = Job();  // release the caches before reporting progress
  std::lock_guard<std::mutex> l(mu_);
  if (s.ok()) {
    ++stats_.written;
    stats_.bytes_written += bytes;
  } else {
    ++stats_.errors;
    stats_.last_error = s.ToString();
  }
  return s;
}

void TierWriter::Drain() {
  const BackgroundPriority background;
  std::unique_lock<std::mutex> l(mu_);
  while (!queue_.empty()) {
    Job job = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= job.bytes;
    l.unlock();
    (void)Run(std::move(job));
    l.lock();
  }
  draining_ = false;
  idle_.notify_all();
}

Status TierWriter::Submit(std::string key, int64_t bytes, std::function<Status()> write) {
  std::unique_lock<std::mutex> l(mu_);
  if (closed_) {
    ++stats_.dropped;
    return Status::OK();
  }
  if (pool_ == nullptr || pool_->StartWorkers(1) == 0) {
    l.unlock();
    return Run(Job{std::move(key), bytes, std::move(write)});
  }
  for (Job& waiting : queue_) {
    if (waiting.key == key) {
      queued_bytes_ += bytes - waiting.bytes;
      waiting.bytes = bytes;
      waiting.write = std::move(write);
      ++stats_.superseded;
      return Status::OK();
    }
  }
  if (queue_.size() >= options_.max_pending || (!queue_.empty() && queued_bytes_ + bytes > options_.max_bytes)) {
    ++stats_.dropped;
    return Status::OK();
  }
  queue_.push_back(Job{std::move(key), bytes, std::move(write)});
  queued_bytes_ += bytes;
  if (!draining_) {
    draining_ = true;
    // The previous drain task has finished its last use of mu_: the wait
    // for it in this assignment is short.
    drain_ = pool_->Submit<int>([this] {
      Drain();
      return 0;
    });
  }
  return Status::OK();
}

void TierWriter::Flush() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return !draining_; });
}

void TierWriter::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  Flush();
}

TierWriter::Stats TierWriter::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace kvstore
