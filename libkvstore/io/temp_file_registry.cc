#include "libkvstore/io/temp_file_registry.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "kvstore/env.h"

namespace kvstore {
namespace {

// Only lock-free atomics may be touched from a signal handler.
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<uint64_t>::is_always_lock_free && std::atomic<char>::is_always_lock_free);

enum SlotState : uint32_t { kFree = 0, kBusy = 1, kReady = 2 };

struct Slot {
  std::atomic<uint32_t> state{kFree};
  // Changes every time the slot becomes ready, so a reader can tell that the
  // path it copied is still the one registered.
  std::atomic<uint64_t> generation{0};
  std::atomic<char> path[kMaxTempPath] = {};
};

// Constant-initialised (no constructor runs), so usable from any static
// initialiser or signal handler.
Slot slots[kTempFileSlots];

}  // namespace

TempFileRegistration::TempFileRegistration(const std::string& path) {
  if (path.size() + 1 > kMaxTempPath || path.find('\0') != std::string::npos) return;
  for (size_t i = 0; i < kTempFileSlots; ++i) {
    Slot& s = slots[i];
    uint32_t expected = kFree;
    if (!s.state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) continue;
    // Release stores: kBusy is seen before any byte of the new path (no
    // fences: ThreadSanitizer does not model them).
    for (size_t k = 0; k < path.size(); ++k) s.path[k].store(path[k], std::memory_order_release);
    s.path[path.size()].store('\0', std::memory_order_release);
    s.generation.fetch_add(1, std::memory_order_relaxed);
    s.state.store(kReady, std::memory_order_release);
    slot_ = static_cast<int>(i);
    return;
  }
}

TempFileRegistration::~TempFileRegistration() {
  if (slot_ < 0) return;
  slots[slot_].state.store(kFree, std::memory_order_release);
}

int RemoveTempFilesInProgress() {
  const int saved_errno = errno;
  int removed = 0;
  for (Slot& s : slots) {
    if (s.state.load(std::memory_order_acquire) != kReady) continue;
    const uint64_t generation = s.generation.load(std::memory_order_acquire);
    char copy[kMaxTempPath];
    size_t k = 0;
    for (; k + 1 < kMaxTempPath; ++k) {
      // Acquire loads: the re-check below cannot move before them.
      copy[k] = s.path[k].load(std::memory_order_acquire);
      if (copy[k] == '\0') break;
    }
    copy[k] = '\0';
    if (s.state.load(std::memory_order_acquire) != kReady ||
        s.generation.load(std::memory_order_acquire) != generation) {
      continue;  // released or reused while we copied: not ours to remove any more
    }
    if (unlink(copy) == 0) ++removed;
  }
  errno = saved_errno;
  return removed;
}

}  // namespace kvstore
