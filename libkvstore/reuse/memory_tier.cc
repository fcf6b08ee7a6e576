#include "libkvstore/reuse/memory_tier.h"

#include <algorithm>

#include "libkvstore/reuse/prefix_hash.h"

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
  out.longer = FindLonger(model, tokens, hashes, out.prefix ? out.prefix->length : 0);
  return out;
}

std::optional<MemoryTier::Found> MemoryTier::FindLonger(const std::string& model, std::span<const int32_t> tokens,
                                                        const std::vector<uint64_t>& hashes, int64_t at_least) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  // Candidates at granule k*G share at least k*G tokens and fewer than
  // (k+1)*G unless shorter: the first granule with one wins.
  for (int64_t a = q / kGranule * kGranule; a > at_least && a >= kGranule; a -= kGranule) {
    auto [first, last] = granules_.equal_range(hashes[static_cast<size_t>(a)]);
    Entry* best = nullptr;
    int64_t best_common = 0;
    int checked = 0;
    for (auto it = first; it != last && checked < kMaxCandidates; ++it) {
      auto e = entries_.find(it->second);
      if (e == entries_.end()) continue;
      Entry& entry = e->second;
      ++checked;
      if (entry.model != model || static_cast<int64_t>(entry.tokens.size()) < a ||
          !std::equal(entry.tokens.begin(), entry.tokens.begin() + a, tokens.begin())) {
        continue;
      }
      int64_t common = a;
      const int64_t limit = std::min<int64_t>(q, static_cast<int64_t>(entry.tokens.size()));
      while (common < limit && entry.tokens[common] == tokens[common]) ++common;
      if (common > best_common) {
        best = &entry;
        best_common = common;
      }
    }
    if (best == nullptr) continue;
    if (best_common <= at_least) return std::nullopt;
    Touch(*best);
    return Found{best->cache, static_cast<int64_t>(best->tokens.size()), best_common};
  }
  return std::nullopt;
}

void MemoryTier::Erase(uint64_t key_hash) {
  auto it = entries_.find(key_hash);
  if (it == entries_.end()) return;
  for (uint64_t g : it->second.granules) {
    auto [first, last] = granules_.equal_range(g);
    for (auto r = first; r != last; ++r) {
      if (r->second == key_hash) {
        granules_.erase(r);
        break;
      }
    }
  }
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
  if (trimmable) {
    for (size_t a = kGranule; a <= tokens.size(); a += kGranule) {
      e.granules.push_back(hashes[a]);
      granules_.emplace(hashes[a], key);
    }
  }
  bytes_ += bytes;
  while (!lru_.empty() && (bytes_ > max_bytes_ || static_cast<int64_t>(entries_.size()) > max_entries_)) {
    Erase(lru_.back());
  }
}

}  // namespace kvstore
