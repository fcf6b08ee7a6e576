#include "libkvstore/tiers/memory_tier.h"

#include <algorithm>

#include "libkvstore/tiers/prefix_hash.h"

namespace kvstore {
namespace {

bool SameKey(const std::string& model, std::span<const int32_t> tokens, const std::string& m,
             const std::vector<int32_t>& t) {
  return m == model && t.size() == tokens.size() && std::equal(t.begin(), t.end(), tokens.begin());
}

}  // namespace

void MemoryTier::Touch(Entry& e) { lru_.splice(lru_.begin(), lru_, e.lru); }

MemoryTier::Lookup MemoryTier::Find(const std::string& model, std::span<const int32_t> tokens) {
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  Lookup out;
  for (size_t len = tokens.size(); len >= 1; --len) {
    auto it = entries_.find(hashes[len]);
    if (it == entries_.end() || !SameKey(model, tokens.first(len), it->second.model, it->second.tokens)) continue;
    Touch(it->second);
    const int64_t n = static_cast<int64_t>(len);
    out.prefix = Found{it->second.cache, n, n};
    break;
  }
  const auto sequence_of = [this](uint64_t key) {
    const Entry& e = entries_.at(key);
    return GranuleIndex<uint64_t>::Sequence{e.model, e.tokens};
  };
  const std::optional<GranuleIndex<uint64_t>::Match> longer =
      granules_.FindLonger(model, tokens, hashes, out.prefix ? out.prefix->length : 0, sequence_of);
  if (longer) {
    Entry& e = entries_.at(longer->id);
    Touch(e);
    out.longer = Found{e.cache, static_cast<int64_t>(e.tokens.size()), longer->common};
  }
  return out;
}

void MemoryTier::Erase(uint64_t key_hash) {
  auto it = entries_.find(key_hash);
  if (it == entries_.end()) return;
  granules_.Remove(key_hash, it->second.granules);
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void MemoryTier::Insert(const std::string& model, std::span<const int32_t> tokens,
                        std::shared_ptr<const PromptCache> cache, int64_t bytes, bool trimmable) {
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  const uint64_t key = hashes.back();
  Erase(key);
  lru_.push_front(key);
  Entry& e = entries_[key];
  e = Entry{model, std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(cache), bytes, trimmable, {},
            lru_.begin()};
  if (trimmable) e.granules = granules_.Add(key, hashes);
  bytes_ += bytes;
  while (!lru_.empty() && (bytes_ > max_bytes_ || static_cast<int64_t>(entries_.size()) > max_entries_)) {
    Erase(lru_.back());
  }
}

}  // namespace kvstore
