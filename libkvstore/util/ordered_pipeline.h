// OrderedPipeline: produce items 0..n-1 on worker threads, consume them in
// order on the calling thread, with at most `window` items produced ahead.
// Used to decompress frames on all cores while the caller writes them.
#ifndef KVSTORE_LIBKVSTORE_UTIL_ORDERED_PIPELINE_H_
#define KVSTORE_LIBKVSTORE_UTIL_ORDERED_PIPELINE_H_

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "kvstore/status.h"
#include "libkvstore/util/parallel.h"

namespace kvstore {

// Calls produce(i) on `threads` workers (0 = all cores) and consume(i, item)
// on this thread in increasing i. Stops at the first error (a produce error
// is reported when its item's turn comes) and returns it.
template <typename T>
Status OrderedPipeline(size_t n, int threads, size_t window, const std::function<Result<T>(size_t)>& produce,
                       const std::function<Status(size_t, T&)>& consume) {
  if (threads <= 0) threads = DefaultThreads();
  if (window == 0) window = 1;
  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::optional<Result<T>>> slots(window);
  size_t next_to_produce = 0, next_to_consume = 0;
  bool stop = false;
  auto work = [&] {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      changed.wait(lock, [&] { return stop || next_to_produce >= n || next_to_produce < next_to_consume + window; });
      if (stop || next_to_produce >= n) return;
      const size_t i = next_to_produce++;
      lock.unlock();
      Result<T> item = produce(i);
      lock.lock();
      slots[i % window].emplace(std::move(item));
      changed.notify_all();
    }
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < threads && static_cast<size_t>(t) < n; ++t) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones started do the work
    }
  }
  if (workers.empty()) {
    // Not one thread could start: produce and consume in turn on this one.
    for (size_t i = 0; i < n; ++i) {
      Result<T> item = produce(i);
      if (!item.ok()) return item.status();
      KV_RETURN_IF_ERROR(consume(i, *item));
    }
    return Status::OK();
  }
  Status status;
  for (size_t i = 0; i < n && status.ok(); ++i) {
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] { return slots[i % window].has_value(); });
    Result<T> item = std::move(*slots[i % window]);
    slots[i % window].reset();
    lock.unlock();
    if (!item.ok()) {
      status = item.status();
    } else {
      status = consume(i, *item);
    }
    lock.lock();
    next_to_consume = i + 1;
    if (!status.ok()) stop = true;
    changed.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  changed.notify_all();
  for (std::thread& t : workers) t.join();
  return status;
}

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_ORDERED_PIPELINE_H_
