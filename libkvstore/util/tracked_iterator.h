// TrackedIterator: reads bytes and publishes how far it has read (internal).
#ifndef KVSTORE_LIBKVSTORE_UTIL_TRACKED_ITERATOR_H_
#define KVSTORE_LIBKVSTORE_UTIL_TRACKED_ITERATOR_H_

#include <cstddef>
#include <iterator>

namespace kvstore {

// An input iterator over bytes whose position is shared: every copy advances
// *cursor, so whoever owns the cursor sees how far a reader that took the
// iterator by value (nlohmann's lexer) has got. The end iterator holds a
// fixed position.
class TrackedIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  explicit TrackedIterator(const char** cursor) : cursor_(cursor) {}
  explicit TrackedIterator(const char* end) : end_(end) {}

  reference operator*() const { return **cursor_; }
  TrackedIterator& operator++() {
    ++*cursor_;
    return *this;
  }
  TrackedIterator operator++(int) {
    TrackedIterator before = *this;
    ++*cursor_;
    return before;
  }
  bool operator==(const TrackedIterator& other) const { return get() == other.get(); }

 private:
  const char* get() const { return cursor_ != nullptr ? *cursor_ : end_; }

  const char** cursor_ = nullptr;
  const char* end_ = nullptr;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_TRACKED_ITERATOR_H_
