#include "libkvstore/util/parallel.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

namespace kvstore {

int DefaultThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  if (threads <= 0) threads = DefaultThreads();
  const size_t workers = std::min<size_t>(static_cast<size_t>(threads), n);
  std::vector<Status> results(n);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) {
      results[i] = fn(i);
      if (!results[i].ok()) return results[i];
    }
    return Status::OK();
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) results[i] = fn(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < workers; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones started and this one do the rest
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace kvstore
