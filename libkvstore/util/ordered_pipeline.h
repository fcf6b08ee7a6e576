// OrderedPipeline: produce items 0..n-1 on the shared pool's workers,
// consume them in order on the calling thread, with at most `window` items
// produced ahead. Used to decompress frames on all cores while the caller
// writes them.
#ifndef KVSTORE_LIBKVSTORE_UTIL_ORDERED_PIPELINE_H_
#define KVSTORE_LIBKVSTORE_UTIL_ORDERED_PIPELINE_H_

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kvstore/status.h"
#include "libkvstore/util/task_pool.h"

namespace kvstore {

// Calls produce(i) on up to `threads` workers (0 = all cores) and
// consume(i, item) on this thread in increasing i. Stops at the first error
// (a produce error is reported when its item's turn comes) and returns it.
// When the item due next has not been taken by a worker (none free, none
// started), this thread produces it itself, so the pipeline never waits for
// the pool. produce must not throw.
template <typename T>
Status OrderedPipeline(size_t n, int threads, size_t window, const std::function<Result<T>(size_t)>& produce,
                       const std::function<Status(size_t, T&)>& consume) {
  if (threads <= 0) threads = DefaultThreads();
  if (window == 0) window = 1;
  // Shared with the helpers, which may start after this call has returned;
  // they touch `produce` only while `producing` counts them.
  struct State {
    std::mutex mu;
    std::condition_variable produced;
    std::vector<std::optional<Result<T>>> slots;  // item i in slot i % window
    size_t next = 0;      // the next item to produce
    size_t consumed = 0;  // items consumed so far
    int helpers = 0;      // scheduled and not ended
    int producing = 0;    // helpers inside produce()
    bool stop = false;
    const std::function<Result<T>(size_t)>* produce = nullptr;
  };
  auto state = std::make_shared<State>();
  state->slots.resize(window);
  state->produce = &produce;
  // A helper produces while the window has room, then ends; the consumer
  // schedules helpers again as it makes room.
  auto helper = [state, n, window] {
    std::unique_lock<std::mutex> lock(state->mu);
    while (!state->stop && state->next < n && state->next < state->consumed + window) {
      const size_t i = state->next++;
      ++state->producing;
      lock.unlock();
      Result<T> item = (*state->produce)(i);
      lock.lock();
      --state->producing;
      state->slots[i % window].emplace(std::move(item));
      state->produced.notify_all();
    }
    --state->helpers;
    state->produced.notify_all();
  };
  auto schedule = [&](std::unique_lock<std::mutex>& lock) {
    while (state->helpers < threads && state->next < std::min(n, state->consumed + window)) {
      ++state->helpers;
      lock.unlock();
      const bool scheduled = TaskPool::Shared().TrySchedule(helper);
      lock.lock();
      if (!scheduled) {
        --state->helpers;
        return;  // no worker: this thread produces
      }
    }
  };
  Status status;
  for (size_t i = 0; i < n && status.ok(); ++i) {
    std::unique_lock<std::mutex> lock(state->mu);
    if (threads > 1) schedule(lock);
    state->produced.wait(lock, [&] { return state->slots[i % window].has_value() || state->next <= i; });
    std::optional<Result<T>> item;
    if (state->slots[i % window].has_value()) {
      item = std::move(state->slots[i % window]);
      state->slots[i % window].reset();
      lock.unlock();
    } else {
      state->next = i + 1;  // nobody took it: produce it here
      lock.unlock();
      item = produce(i);
    }
    status = item->ok() ? consume(i, **item) : item->status();
    lock.lock();
    state->consumed = i + 1;
  }
  std::unique_lock<std::mutex> lock(state->mu);
  state->stop = true;
  state->produced.wait(lock, [&] { return state->producing == 0; });
  return status;
}

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_ORDERED_PIPELINE_H_
