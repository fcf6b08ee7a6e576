// ParallelFor: runs fn(i) for i in [0, n) on up to `threads` threads (0 = all
// cores), the caller's included. Items are handed out dynamically; returns
// the first error by index. Threads the system refuses to start are done
// without (never an exception). Starts threads on every call: code called
// per request uses a TaskPool (task_pool.h) instead.
#ifndef KVSTORE_LIBKVSTORE_UTIL_PARALLEL_H_
#define KVSTORE_LIBKVSTORE_UTIL_PARALLEL_H_

#include <cstddef>
#include <functional>

#include "kvstore/status.h"

namespace kvstore {

int DefaultThreads();

Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_PARALLEL_H_
