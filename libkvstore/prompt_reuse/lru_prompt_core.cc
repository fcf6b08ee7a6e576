// internal::LruPromptCore: mlx-lm's LRUPromptCache bookkeeping (cache.py
// CacheOrder, insert_cache, fetch_nearest_cache, trim_to) over entry ids.
#include <algorithm>

#include "kvstore/lru_prompt_cache.h"

namespace kvstore::internal {

int64_t LruPromptCore::size() const {
  size_t n = 0;
  for (const auto& queue : order_) n += queue.size();
  return static_cast<int64_t>(n);
}

void LruPromptCore::Forget(const Entry& entry) {
  n_bytes_ -= entry.nbytes;
  n_bytes_by_type_[Tier(entry.cache_type)] -= entry.nbytes;
}

void LruPromptCore::RemoveFromOrder(const PromptKey& key) {
  for (auto& queue : order_) {
    auto it = std::find(queue.begin(), queue.end(), key);
    if (it != queue.end()) {
      queue.erase(it);
      return;
    }
  }
}

LruPromptCore::Id LruPromptCore::EvictOne() {
  // CacheOrder.pop: compare each tier with the next one.
  size_t victim = kNumCacheTypes - 1;
  for (size_t i = 0; i + 1 < kNumCacheTypes; ++i) {
    if (!order_[i].empty() && order_[i].size() >= order_[i + 1].size()) {
      victim = i;
      break;
    }
  }
  PromptKey key = std::move(order_[victim].front());
  order_[victim].pop_front();
  // The queues and the trie hold the same keys, so the pop cannot fail.
  Result<Entry> entry = trie_.Pop(key.model, key.tokens);
  if (!entry.ok()) return 0;
  Forget(*entry);
  return entry->id;
}

std::vector<LruPromptCore::Id> LruPromptCore::Insert(std::string_view model, std::span<const int32_t> tokens,
                                                     const Entry& entry) {
  std::vector<Id> removed;
  n_bytes_ += entry.nbytes;
  n_bytes_by_type_[Tier(entry.cache_type)] += entry.nbytes;
  PromptKey key{std::string(model), std::vector<int32_t>(tokens.begin(), tokens.end())};
  std::optional<Entry> previous = trie_.Add(model, tokens, entry);
  if (previous.has_value()) {
    Forget(*previous);
    RemoveFromOrder(key);
    removed.push_back(previous->id);
  }
  order_[Tier(entry.cache_type)].push_back(key);

  if (entry.trimmable) {
    // The path was just created, so this cannot fail.
    auto prefixes = trie_.PopPrefixes(model, tokens);
    if (prefixes.ok()) {
      for (const auto& [length, prefix] : *prefixes) {
        Forget(prefix);
        RemoveFromOrder(PromptKey{key.model, std::vector<int32_t>(tokens.begin(), tokens.begin() + length)});
        removed.push_back(prefix.id);
      }
    }
  }

  if (size() > max_size_ && size() > 0) removed.push_back(EvictOne());
  while (n_bytes_ > max_bytes_ && size() > 0) removed.push_back(EvictOne());
  return removed;
}

std::optional<LruPromptCore::Nearest> LruPromptCore::Find(std::string_view model,
                                                          std::span<const int32_t> tokens) const {
  const PromptTrieResult found = trie_.Search(model, tokens);
  const auto q = static_cast<int64_t>(tokens.size());
  if (found.exact.has_value()) return Nearest{trie_.Find(model, *found.exact)->id, q, q};

  const auto short_length = static_cast<int64_t>(found.shorter.has_value() ? found.shorter->size() : 0);
  if (found.longer.has_value() && found.common_prefix > short_length) {
    const Entry* entry = trie_.Find(model, *found.longer);
    if (entry->trimmable) {
      // Keep at least one token to process: an exact-length cache would
      // leave the model nothing to compute logits from.
      return Nearest{entry->id, static_cast<int64_t>(found.longer->size()), std::min(q - 1, found.common_prefix)};
    }
  }
  if (short_length > 0) return Nearest{trie_.Find(model, *found.shorter)->id, short_length, short_length};
  return std::nullopt;
}

std::vector<LruPromptCore::Id> LruPromptCore::TrimTo(std::optional<int64_t> n_sequences,
                                                     std::optional<int64_t> n_bytes) {
  constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  const int64_t max_sequences = n_sequences.has_value() ? std::max<int64_t>(0, *n_sequences) : kNoLimit;
  const int64_t max_bytes = n_bytes.has_value() ? std::max<int64_t>(0, *n_bytes) : kNoLimit;
  std::vector<Id> removed;
  while (size() > max_sequences) removed.push_back(EvictOne());
  while (n_bytes_ > max_bytes && size() > 0) removed.push_back(EvictOne());
  return removed;
}

std::array<CacheTypeStats, kNumCacheTypes> LruPromptCore::StatsByType() const {
  std::array<CacheTypeStats, kNumCacheTypes> stats;
  for (size_t i = 0; i < kNumCacheTypes; ++i) {
    stats[i] = {static_cast<int64_t>(order_[i].size()), n_bytes_by_type_[i]};
  }
  return stats;
}

std::vector<PromptKey> LruPromptCore::Order(CacheType cache_type) const {
  const auto& queue = order_[Tier(cache_type)];
  return std::vector<PromptKey>(queue.begin(), queue.end());
}

void LruPromptCore::ForEach(
    const std::function<void(std::string_view, std::span<const int32_t>, const Entry&)>& fn) const {
  trie_.ForEach(fn);
}

}  // namespace kvstore::internal
