// Measures memory a piece of code asks for, without timing or RSS: while a
// LargestAllocation is alive, every operator new on its thread records its
// size. The test binary that links largest_allocation.cc replaces the global
// operator new (forwarding to malloc) to do so.
#ifndef KVSTORE_TESTS_LARGEST_ALLOCATION_H_
#define KVSTORE_TESTS_LARGEST_ALLOCATION_H_

#include <cstddef>

namespace kvstore::testing {

class LargestAllocation {
 public:
  LargestAllocation();
  ~LargestAllocation();
  LargestAllocation(const LargestAllocation&) = delete;
  LargestAllocation& operator=(const LargestAllocation&) = delete;

  // The largest single request on this thread since construction.
  size_t bytes() const;
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_LARGEST_ALLOCATION_H_
