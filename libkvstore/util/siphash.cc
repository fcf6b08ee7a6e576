#include "libkvstore/util/siphash.h"

#include <sys/random.h>

#include <chrono>

namespace kvstore {

SipKey ProcessSipKey() {
  static const SipKey key = [] {
    uint64_t words[2];
    if (getrandom(words, sizeof(words), GRND_NONBLOCK) == static_cast<ssize_t>(sizeof(words))) {
      return SipKey{words[0], words[1]};
    }
    // No entropy yet (early boot): the clock and the address space layout
    // still differ from process to process.
    const auto now =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return SipKey{now ^ reinterpret_cast<uintptr_t>(&words),
                  reinterpret_cast<uintptr_t>(&ProcessSipKey) * 0x9E3779B97F4A7C15ULL};
  }();
  return key;
}

}  // namespace kvstore
