// HashPipeline: digests (SHA-256 or XXH3-128) of a stream of arrays on the shared pool's workers,
// while the caller goes on (e.g. writes the same arrays to a file).
#ifndef KVSTORE_LIBKVSTORE_FORMAT_HASH_PIPELINE_H_
#define KVSTORE_LIBKVSTORE_FORMAT_HASH_PIPELINE_H_

#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/digest.h"
#include "libkvstore/util/task_queue.h"

namespace kvstore {

// Thread safety: Submit and Finish are called by one thread.
class HashPipeline {
 public:
  // Hashes on up to `threads` workers (0 = all cores; 1 = none: Submit
  // hashes inline). Submit waits while more than `max_pending_bytes` are
  // queued or being hashed (the arrays are kept alive until hashed), and
  // meanwhile hashes queued arrays itself, so it never waits for a worker
  // that has not started.
  HashPipeline(DigestAlgorithm algorithm, int threads, uint64_t max_pending_bytes);
  HashPipeline(const HashPipeline&) = delete;
  HashPipeline& operator=(const HashPipeline&) = delete;

  // Queues `array` as item `id` (ids are dense, 0-based).
  void Submit(size_t id, Array array);
  // Waits for every item; digests indexed by id.
  std::vector<Digest> Finish();

 private:
  void Hash(size_t id, Array array);

  const DigestAlgorithm algorithm_;
  const uint64_t max_pending_bytes_;
  std::mutex mu_;
  std::condition_variable hashed_;
  uint64_t pending_bytes_ = 0;
  std::vector<Digest> digests_;
  // Last: destroyed first, so no job runs once the members above are gone.
  std::optional<TaskQueue> queue_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_HASH_PIPELINE_H_
