// HashPipeline: SHA-256 of a stream of arrays on worker threads, while the
// caller goes on (e.g. writes the same arrays to a file).
#ifndef KVSTORE_LIBKVSTORE_FORMAT_HASH_PIPELINE_H_
#define KVSTORE_LIBKVSTORE_FORMAT_HASH_PIPELINE_H_

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstore/array.h"
#include "libkvstore/integrity/sha256.h"

namespace kvstore {

// Thread safety: Submit and Finish are called by one thread.
class HashPipeline {
 public:
  // `threads` workers (0 = all cores; 1 = none: Submit hashes inline, as
  // it does when no worker can be started). Submit blocks while more than
  // `max_pending_bytes` are queued or being hashed (the arrays are kept
  // alive until hashed).
  HashPipeline(int threads, uint64_t max_pending_bytes);
  ~HashPipeline();
  HashPipeline(const HashPipeline&) = delete;
  HashPipeline& operator=(const HashPipeline&) = delete;

  // Queues `array` as item `id` (ids are dense, 0-based).
  void Submit(size_t id, Array array);
  // Waits for every item; digests indexed by id.
  std::vector<Sha256Digest> Finish();

 private:
  struct Job {
    size_t id;
    Array array;
  };
  void Work();

  const uint64_t max_pending_bytes_;
  std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable room_;
  std::deque<Job> queue_;
  uint64_t pending_bytes_ = 0;
  bool closing_ = false;
  std::vector<Sha256Digest> digests_;
  std::vector<std::thread> workers_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_HASH_PIPELINE_H_
