// ParallelFor on the shared pool: fn(i) for i in [0, n) on up to `threads`
// threads (0 = all cores), the caller's included. Items are handed out
// dynamically; returns the first error by index. When the pool has no
// worker to spare (busy, or the system refuses threads) the caller does the
// work: never an exception, never a wait for a worker.
#ifndef KVSTORE_LIBKVSTORE_UTIL_PARALLEL_H_
#define KVSTORE_LIBKVSTORE_UTIL_PARALLEL_H_

#include <cstddef>
#include <functional>

#include "kvstore/status.h"
#include "libkvstore/util/task_pool.h"

namespace kvstore {

inline Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  return TaskPool::Shared().ParallelFor(n, threads, fn);
}

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_PARALLEL_H_
