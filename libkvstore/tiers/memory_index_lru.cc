// The server policy's memory tier: caches by (model key, tokens) with LRU
// eviction over an entry and a byte budget, and two lookups for a query:
//   * the longest stored key that is a prefix of the query (O(query):
//     one hash probe per key length held);
//   * among entries whose every layer can be trimmed, the one sharing the
//     longest common prefix with the query, even when it is longer (the
//     "edit the last message" case): a GranuleIndex, O(query / 32) probes.
// Both are the PrefixIndex (prefix_index.h) the disk tier's index uses too.
#include <algorithm>
#include <limits>

#include "libkvstore/tiers/memory_index.h"
#include "libkvstore/tiers/prefix_hash.h"
#include "libkvstore/tiers/prefix_index.h"

namespace kvstore {
namespace {

class LruMemoryIndex final : public MemoryIndex {
 public:
  LruMemoryIndex(int64_t max_entries, int64_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  std::vector<TierHit> Find(const std::string& model, std::span<const int32_t> tokens,
                              int64_t max_reused) override;
  void Insert(const std::string& model, std::span<const int32_t> tokens, EntryPtr entry, CacheType type,
              std::vector<EntryPtr>& removed) override;
  void TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes, std::vector<EntryPtr>& removed) override;
  int64_t entries() const override { return static_cast<int64_t>(index_.size()); }
  int64_t bytes() const override { return index_.bytes(); }
  std::array<CacheTypeStats, kNumCacheTypes> StatsByType() const override { return by_type_; }

 private:
  struct Entry {
    PrefixKey key;
    int64_t bytes = 0;
    EntryPtr entry;
    CacheType type = CacheType::kAssistant;
  };
  void Erase(uint64_t key_hash, std::vector<EntryPtr>& removed);
  void EvictWhileOver(int64_t max_entries, int64_t max_bytes, std::vector<EntryPtr>& removed);

  int64_t max_entries_;
  int64_t max_bytes_;
  PrefixIndex<uint64_t, Entry> index_;  // by key hash
  std::array<CacheTypeStats, kNumCacheTypes> by_type_{};
};

std::vector<TierHit> LruMemoryIndex::Find(const std::string& model, std::span<const int32_t> tokens,
                                          int64_t max_reused) {
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  std::vector<TierHit> out;
  int64_t prefix = 0;
  if (const auto* node = index_.FindLongestPrefix(model, tokens, hashes, tokens.size())) {
    prefix = static_cast<int64_t>(node->value.key.tokens.size());
    out.push_back({node->value.entry, prefix, std::min(prefix, max_reused)});
  }
  int64_t common = 0;
  if (const auto* node = index_.FindLonger(model, tokens, hashes, prefix, common)) {
    out.push_back({node->value.entry, static_cast<int64_t>(node->value.key.tokens.size()),
                   std::min(common, max_reused)});
  }
  // The more reused first (a stable sort keeps the stored prefix first on a tie).
  std::stable_sort(out.begin(), out.end(), [](const TierHit& a, const TierHit& b) { return a.reused > b.reused; });
  return out;
}

void LruMemoryIndex::Erase(uint64_t key_hash, std::vector<EntryPtr>& removed) {
  std::optional<Entry> e = index_.Erase(key_hash);
  if (!e) return;
  CacheTypeStats& t = by_type_[static_cast<size_t>(e->type)];
  t.n_sequences -= 1;
  t.n_bytes -= e->bytes;
  removed.push_back(std::move(e->entry));
}

void LruMemoryIndex::EvictWhileOver(int64_t max_entries, int64_t max_bytes, std::vector<EntryPtr>& removed) {
  while (index_.size() > 0 &&
         (index_.bytes() > max_bytes || static_cast<int64_t>(index_.size()) > max_entries)) {
    Erase(index_.LeastRecent()->id, removed);
  }
}

void LruMemoryIndex::Insert(const std::string& model, std::span<const int32_t> tokens, EntryPtr entry,
                           CacheType type, std::vector<EntryPtr>& removed) {
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  const uint64_t key = hashes.back();
  Erase(key, removed);
  const int64_t bytes = entry->bytes();
  const bool trimmable = entry->trimmable();
  index_.Insert(key, Entry{PrefixKey{model, std::vector<int32_t>(tokens.begin(), tokens.end())}, bytes,
                           std::move(entry), type},
                key, trimmable ? std::span<const uint64_t>(hashes) : std::span<const uint64_t>());
  CacheTypeStats& t = by_type_[static_cast<size_t>(type)];
  t.n_sequences += 1;
  t.n_bytes += bytes;
  EvictWhileOver(max_entries_, max_bytes_, removed);
}

void LruMemoryIndex::TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes,
                           std::vector<EntryPtr>& removed) {
  constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  EvictWhileOver(entries ? std::max<int64_t>(0, *entries) : kNoLimit, bytes ? std::max<int64_t>(0, *bytes) : kNoLimit,
                 removed);
}

}  // namespace

std::unique_ptr<MemoryIndex> NewLruMemoryIndex(int64_t max_entries, int64_t max_bytes) {
  return std::make_unique<LruMemoryIndex>(max_entries, max_bytes);
}

}  // namespace kvstore
