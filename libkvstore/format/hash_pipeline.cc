#include "libkvstore/format/hash_pipeline.h"

#include "libkvstore/integrity/digest.h"

namespace kvstore {

HashPipeline::HashPipeline(DigestAlgorithm algorithm, int threads, uint64_t max_pending_bytes)
    : algorithm_(algorithm), max_pending_bytes_(max_pending_bytes) {
  if (threads <= 0) threads = DefaultThreads();
  // One thread is the caller's: it hashes as it submits.
  if (threads > 1) queue_.emplace(TaskPool::Shared(), TaskQueue::Options{.concurrency = threads});
}

void HashPipeline::Hash(size_t id, Array array) {
  const uint64_t bytes = array.nbytes();
  const Digest d = ComputeDigest(algorithm_, array);
  array = Array();  // released before the room it frees is reported
  {
    std::lock_guard<std::mutex> lock(mu_);
    digests_[id] = d;
    pending_bytes_ -= bytes;
  }
  hashed_.notify_all();
}

void HashPipeline::Submit(size_t id, Array array) {
  const uint64_t bytes = array.nbytes();
  std::unique_lock<std::mutex> lock(mu_);
  if (digests_.size() <= id) digests_.resize(id + 1, Digest(algorithm_));
  pending_bytes_ += bytes;
  if (!queue_) {
    lock.unlock();
    return Hash(id, std::move(array));
  }
  // Over the budget (one item larger than it still goes through, alone):
  // hash queued items here, or wait for the ones being hashed.
  auto over = [&] { return pending_bytes_ > bytes && pending_bytes_ > max_pending_bytes_; };
  while (over()) {
    lock.unlock();
    const bool ran = queue_->RunOne();
    lock.lock();
    if (!ran && over()) {
      const uint64_t before = pending_bytes_;
      hashed_.wait(lock, [&] { return pending_bytes_ < before; });
    }
  }
  lock.unlock();
  (void)queue_->TryPush([this, id, array = std::move(array)]() mutable { Hash(id, std::move(array)); });
}

std::vector<Digest> HashPipeline::Finish() {
  if (queue_) {
    while (queue_->RunOne()) {
    }
    queue_->Flush();
  }
  return std::move(digests_);
}

}  // namespace kvstore
