// KeyIndex: finds a repeated key in a JSON object being parsed (internal).
#ifndef KVSTORE_LIBKVSTORE_UTIL_JSON_KEY_INDEX_H_
#define KVSTORE_LIBKVSTORE_UTIL_JSON_KEY_INDEX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kvstore/json.h"
#include "libkvstore/util/siphash.h"

namespace kvstore {

// The keys of one object as an open-addressing table of member indices: no
// allocation per key and no copy of it. `members` must outlive the index;
// it may grow (the index holds positions, not pointers into it). Keys are
// hashed with SipHash under a per-process secret, so a hostile file cannot
// make them collide.
class KeyIndex {
 public:
  // Objects with more members are not indexed (their text would take 24 GB).
  static constexpr size_t kMaxMembers = UINT32_MAX - 1;

  explicit KeyIndex(const Json::Object* members) : members_(members), sip_key_(ProcessSipKey()) {}

  uint32_t Hash(std::string_view key) const {
    return static_cast<uint32_t>(SipHash13(sip_key_, key));
  }

  // True when a member indexed so far has key `key`, whose Hash is `hash`.
  bool Contains(std::string_view key, uint32_t hash) const {
    if (slots_.empty()) return false;
    for (size_t s = hash & mask();; s = (s + 1) & mask()) {
      const Slot& slot = slots_[s];
      if (slot.index == kEmpty) return false;
      if (slot.hash == hash && (*members_)[slot.index].first == key) return true;
    }
  }

  // Indexes member `i`, whose key has Hash `hash` and is not indexed yet.
  void Add(uint32_t i, uint32_t hash) {
    if (2 * (count_ + 1) > slots_.size()) Grow();
    size_t s = hash & mask();
    while (slots_[s].index != kEmpty) s = (s + 1) & mask();
    slots_[s] = {hash, i};
    ++count_;
  }

 private:
  struct Slot {
    uint32_t hash;
    uint32_t index;
  };
  static constexpr uint32_t kEmpty = UINT32_MAX;

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
  SipKey sip_key_;
  std::vector<Slot> slots_;  // a power of two, at most half full
  size_t count_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_JSON_KEY_INDEX_H_
