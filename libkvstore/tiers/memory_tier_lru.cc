// The server policy's memory tier: caches by (model key, tokens) with LRU
// eviction over an entry and a byte budget, and two lookups for a query:
//   * the longest stored key that is a prefix of the query (O(query):
//     one hash probe per prefix length);
//   * among entries whose every layer can be trimmed, the one sharing the
//     longest common prefix with the query, even when it is longer (the
//     "edit the last message" case): a GranuleIndex, O(query / 32) probes.
#include <algorithm>
#include <limits>
#include <list>
#include <unordered_map>

#include "libkvstore/tiers/granule_index.h"
#include "libkvstore/tiers/memory_tier.h"
#include "libkvstore/tiers/prefix_hash.h"

namespace kvstore {
namespace {

class LruMemoryTier final : public MemoryTier {
 public:
  LruMemoryTier(int64_t max_entries, int64_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  std::vector<Candidate> Find(const std::string& model, std::span<const int32_t> tokens, int64_t query) override;
  void Insert(const std::string& model, std::span<const int32_t> tokens, EntryPtr entry, CacheType type,
              std::vector<EntryPtr>& removed) override;
  void TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes, std::vector<EntryPtr>& removed) override;
  int64_t entries() const override { return static_cast<int64_t>(entries_.size()); }
  int64_t bytes() const override { return bytes_; }
  std::array<CacheTypeStats, kNumCacheTypes> StatsByType() const override { return by_type_; }

 private:
  struct Entry {
    std::string model;
    std::vector<int32_t> tokens;
    EntryPtr entry;
    CacheType type = CacheType::kAssistant;
    std::vector<uint64_t> granules;  // registered prefix hashes (trimmable entries)
    std::list<uint64_t>::iterator lru;
  };
  void Erase(uint64_t key_hash, std::vector<EntryPtr>& removed);
  void Touch(Entry& e) { lru_.splice(lru_.begin(), lru_, e.lru); }
  void EvictWhileOver(int64_t max_entries, int64_t max_bytes, std::vector<EntryPtr>& removed);

  int64_t max_entries_;
  int64_t max_bytes_;
  std::unordered_map<uint64_t, Entry> entries_;  // key hash -> entry
  GranuleIndex<uint64_t> granules_;              // trimmable entries, by key hash
  std::list<uint64_t> lru_;                      // front = most recent
  int64_t bytes_ = 0;
  std::array<CacheTypeStats, kNumCacheTypes> by_type_{};
};

bool SameKey(const std::string& model, std::span<const int32_t> tokens, const std::string& m,
             const std::vector<int32_t>& t) {
  return m == model && t.size() == tokens.size() && std::equal(t.begin(), t.end(), tokens.begin());
}

std::vector<MemoryTier::Candidate> LruMemoryTier::Find(const std::string& model, std::span<const int32_t> tokens,
                                                       int64_t query) {
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  std::vector<Candidate> out;
  int64_t prefix = 0;
  for (size_t len = tokens.size(); len >= 1; --len) {
    auto it = entries_.find(hashes[len]);
    if (it == entries_.end() || !SameKey(model, tokens.first(len), it->second.model, it->second.tokens)) continue;
    Touch(it->second);
    prefix = static_cast<int64_t>(len);
    out.push_back({it->second.entry, prefix, std::min(prefix, query - 1), len == tokens.size()});
    break;
  }
  const auto sequence_of = [this](uint64_t key) {
    const Entry& e = entries_.at(key);
    return GranuleIndex<uint64_t>::Sequence{e.model, e.tokens};
  };
  const std::optional<GranuleIndex<uint64_t>::Match> longer =
      granules_.FindLonger(model, tokens, hashes, prefix, sequence_of);
  if (longer) {
    Entry& e = entries_.at(longer->id);
    Touch(e);
    out.push_back({e.entry, static_cast<int64_t>(e.tokens.size()), std::min(longer->common, query - 1), false});
  }
  // The more reused first (a stable sort keeps the stored prefix first on a tie).
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.reused > b.reused; });
  return out;
}

void LruMemoryTier::Erase(uint64_t key_hash, std::vector<EntryPtr>& removed) {
  auto it = entries_.find(key_hash);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  granules_.Remove(key_hash, e.granules);
  const int64_t bytes = e.entry->bytes();
  bytes_ -= bytes;
  CacheTypeStats& t = by_type_[static_cast<size_t>(e.type)];
  t.n_sequences -= 1;
  t.n_bytes -= bytes;
  lru_.erase(e.lru);
  removed.push_back(std::move(e.entry));
  entries_.erase(it);
}

void LruMemoryTier::EvictWhileOver(int64_t max_entries, int64_t max_bytes, std::vector<EntryPtr>& removed) {
  while (!lru_.empty() && (bytes_ > max_bytes || static_cast<int64_t>(entries_.size()) > max_entries)) {
    Erase(lru_.back(), removed);
  }
}

void LruMemoryTier::Insert(const std::string& model, std::span<const int32_t> tokens, EntryPtr entry,
                           CacheType type, std::vector<EntryPtr>& removed) {
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  const uint64_t key = hashes.back();
  Erase(key, removed);
  lru_.push_front(key);
  const int64_t bytes = entry->bytes();
  const bool trimmable = entry->trimmable();
  Entry& e = entries_[key];
  e = Entry{model, std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(entry), type, {}, lru_.begin()};
  if (trimmable) e.granules = granules_.Add(key, hashes);
  bytes_ += bytes;
  CacheTypeStats& t = by_type_[static_cast<size_t>(type)];
  t.n_sequences += 1;
  t.n_bytes += bytes;
  EvictWhileOver(max_entries_, max_bytes_, removed);
}

void LruMemoryTier::TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes,
                           std::vector<EntryPtr>& removed) {
  constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  EvictWhileOver(entries ? std::max<int64_t>(0, *entries) : kNoLimit, bytes ? std::max<int64_t>(0, *bytes) : kNoLimit,
                 removed);
}

}  // namespace

std::unique_ptr<MemoryTier> NewLruMemoryTier(int64_t max_entries, int64_t max_bytes) {
  return std::make_unique<LruMemoryTier>(max_entries, max_bytes);
}

}  // namespace kvstore
