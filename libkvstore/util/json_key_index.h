// KeyIndex: finds a repeated key in a JSON object being parsed (internal).
#ifndef KVSTORE_LIBKVSTORE_UTIL_JSON_KEY_INDEX_H_
#define KVSTORE_LIBKVSTORE_UTIL_JSON_KEY_INDEX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "kvstore/json.h"

namespace kvstore {

// The keys of one object as an open-addressing table of member indices: no
// allocation per key and no copy of it. `members` must outlive the index;
// it may grow (the index holds positions, not pointers into it).
class KeyIndex {
 public:
  explicit KeyIndex(const Json::Object* members) : members_(members) {}

  // Adds member `i`; false when an earlier member has the same key.
  bool Insert(size_t i) {
    if (2 * (count_ + 1) > slots_.size()) Grow();
    const size_t hash = Hash(i);
    for (size_t s = hash & mask();; s = (s + 1) & mask()) {
      Slot& slot = slots_[s];
      if (slot.index == kEmpty) {
        slot = {hash, i};
        ++count_;
        return true;
      }
      if (slot.hash == hash && (*members_)[slot.index].first == (*members_)[i].first) return false;
    }
  }

 private:
  struct Slot {
    size_t hash;
    size_t index;
  };
  static constexpr size_t kEmpty = SIZE_MAX;

  size_t Hash(size_t i) const { return std::hash<std::string_view>()((*members_)[i].first); }
  size_t mask() const { return slots_.size() - 1; }
  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(64, 2 * old.size()), Slot{0, kEmpty});
    for (const Slot& slot : old) {
      if (slot.index == kEmpty) continue;
      size_t s = slot.hash & mask();
      while (slots_[s].index != kEmpty) s = (s + 1) & mask();
      slots_[s] = slot;
    }
  }

  const Json::Object* members_;
  std::vector<Slot> slots_;  // a power of two, at most half full
  size_t count_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_JSON_KEY_INDEX_H_
