#include "largest_allocation.h"

#include <cstdlib>
#include <new>

namespace {

// Plain thread_locals (no constructors): operator new may run before main
// and on any thread.
thread_local bool measuring = false;
thread_local size_t largest = 0;

}  // namespace

void* operator new(size_t n) {
  if (measuring && n > largest) largest = n;
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace kvstore::testing {

LargestAllocation::LargestAllocation() {
  measuring = true;
  largest = 0;
}
LargestAllocation::~LargestAllocation() { measuring = false; }
size_t LargestAllocation::bytes() const { return largest; }

}  // namespace kvstore::testing
