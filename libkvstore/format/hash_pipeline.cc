#include "libkvstore/format/hash_pipeline.h"

#include <system_error>

#include "libkvstore/util/parallel.h"

namespace kvstore {

HashPipeline::HashPipeline(int threads, uint64_t max_pending_bytes) : max_pending_bytes_(max_pending_bytes) {
  if (threads <= 0) threads = DefaultThreads();
  // One thread is the caller's: it hashes as it submits (no worker to start).
  for (int i = 0; threads > 1 && i < threads; ++i) {
    try {
      workers_.emplace_back([this] { Work(); });
    } catch (const std::system_error&) {
      break;  // fewer workers; with none, Submit hashes inline
    }
  }
}

HashPipeline::~HashPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void HashPipeline::Submit(size_t id, Array array) {
  const uint64_t bytes = array.nbytes();
  if (workers_.empty()) {
    if (digests_.size() <= id) digests_.resize(id + 1);
    digests_[id] = Sha256(array);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  // One item larger than the budget still goes through, alone.
  room_.wait(lock, [&] { return pending_bytes_ == 0 || pending_bytes_ + bytes <= max_pending_bytes_; });
  pending_bytes_ += bytes;
  if (digests_.size() <= id) digests_.resize(id + 1);
  queue_.push_back(Job{id, std::move(array)});
  lock.unlock();
  work_ready_.notify_one();
}

void HashPipeline::Work() {
  while (true) {
    std::unique_lock<std::mutex> lock(mu_);
    work_ready_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing and drained
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const Sha256Digest d = Sha256(job.array);
    const uint64_t bytes = job.array.nbytes();
    job.array = Array();  // release before reporting room
    lock.lock();
    digests_[job.id] = d;
    pending_bytes_ -= bytes;
    lock.unlock();
    room_.notify_all();
  }
}

std::vector<Sha256Digest> HashPipeline::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  return std::move(digests_);
}

}  // namespace kvstore
