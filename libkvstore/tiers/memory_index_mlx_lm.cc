// The mlx-lm policy's memory tier: mlx-lm's LRUPromptCache bookkeeping
// (internal::LruPromptCore, shared with kvstore::LRUPromptCache) over
// MemoryEntry objects.
#include <algorithm>
#include <unordered_map>

#include "libkvstore/tiers/memory_index.h"

namespace kvstore {
namespace {

class MlxLmMemoryIndex final : public MemoryIndex {
 public:
  MlxLmMemoryIndex(int64_t max_entries, int64_t max_bytes) : core_(max_entries, max_bytes) {}

  std::vector<TierHit> Find(const std::string& model, std::span<const int32_t> tokens,
                            int64_t max_reused) override {
    const std::optional<internal::LruPromptCore::Nearest> found = core_.Find(model, tokens);
    if (!found) return {};
    return {{entries_.at(found->id), found->length, std::min(found->reused, max_reused)}};
  }

  void Insert(const std::string& model, std::span<const int32_t> tokens, EntryPtr entry, CacheType type,
              std::vector<EntryPtr>& removed) override {
    const internal::LruPromptCore::Entry stored{next_id_++, entry->bytes(), entry->trimmable(), type};
    entries_.emplace(stored.id, std::move(entry));
    Release(core_.Insert(model, tokens, stored), removed);
  }

  void TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes,
              std::vector<EntryPtr>& removed) override {
    Release(core_.TrimTo(entries, bytes), removed);
  }

  int64_t entries() const override { return core_.size(); }
  int64_t bytes() const override { return core_.nbytes(); }
  std::array<CacheTypeStats, kNumCacheTypes> StatsByType() const override { return core_.StatsByType(); }

 private:
  void Release(const std::vector<internal::LruPromptCore::Id>& ids, std::vector<EntryPtr>& removed) {
    for (internal::LruPromptCore::Id id : ids) {
      auto it = entries_.find(id);
      if (it == entries_.end()) continue;
      removed.push_back(std::move(it->second));
      entries_.erase(it);
    }
  }

  internal::LruPromptCore core_;
  std::unordered_map<internal::LruPromptCore::Id, EntryPtr> entries_;
  internal::LruPromptCore::Id next_id_ = 0;
};

}  // namespace

std::unique_ptr<MemoryIndex> NewMlxLmMemoryIndex(int64_t max_entries, int64_t max_bytes) {
  return std::make_unique<MlxLmMemoryIndex>(max_entries, max_bytes);
}

}  // namespace kvstore
