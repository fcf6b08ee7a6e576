#include "largest_allocation.h"

#include <cstdlib>
#include <new>

namespace {

// Plain thread_locals (no constructors): operator new may run before main
// and on any thread.
thread_local bool measuring = false;
thread_local size_t largest = 0;

void* Allocate(size_t n) noexcept {
  if (measuring && n > largest) largest = n;
  return std::malloc(n == 0 ? 1 : n);
}

}  // namespace

// Every replaceable form but the aligned ones, so that what one of them
// allocates another may free (a sanitizer's own operator new would not
// match our operator delete).
void* operator new(size_t n) {
  if (void* p = Allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace kvstore::testing {

LargestAllocation::LargestAllocation() {
  measuring = true;
  largest = 0;
}
LargestAllocation::~LargestAllocation() { measuring = false; }
size_t LargestAllocation::bytes() const { return largest; }

}  // namespace kvstore::testing
