#include "kvstore/lru_prompt_cache.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "kvstore/prompt_cache.h"

namespace kvstore {

namespace {

constexpr std::array<std::string_view, kNumCacheTypes> kCacheTypeNames = {"assistant", "user",
                                                                          "system"};

// copy.deepcopy of a list: layers that are the same object stay shared in
// the copy.
PromptCache DeepCopy(const PromptCache& cache) {
  std::unordered_map<const Cache*, std::shared_ptr<Cache>> copies;
  PromptCache out;
  out.reserve(cache.size());
  for (const std::shared_ptr<Cache>& layer : cache) {
    std::shared_ptr<Cache>& copy = copies[layer.get()];
    if (copy == nullptr) copy = layer->Copy();
    out.push_back(copy);
  }
  return out;
}

// tokens[from:to] as a vector.
std::vector<int32_t> Slice(std::span<const int32_t> tokens, size_t from, size_t to) {
  return std::vector<int32_t>(tokens.begin() + static_cast<ptrdiff_t>(from),
                              tokens.begin() + static_cast<ptrdiff_t>(to));
}

}  // namespace

std::string_view CacheTypeName(CacheType type) {
  return kCacheTypeNames[static_cast<size_t>(type)];
}

Result<CacheType> ParseCacheType(std::string_view name) {
  for (CacheType type : kCacheTypes) {
    if (CacheTypeName(type) == name) return type;
  }
  return Status::NotFound("LRUPromptCache: unknown cache_type '" + std::string(name) +
                          "' (expected assistant, user or system)");
}

LRUPromptCache::LRUPromptCache(int64_t max_size, int64_t max_bytes)
    : max_size_(max_size), max_bytes_(max_bytes) {}

int64_t LRUPromptCache::size() const {
  size_t n = 0;
  for (const auto& queue : order_) n += queue.size();
  return static_cast<int64_t>(n);
}

void LRUPromptCache::Forget(const CacheEntry& entry) {
  n_bytes_ -= entry.nbytes;
  n_bytes_by_type_[Tier(entry.cache_type)] -= entry.nbytes;
}

void LRUPromptCache::RemoveFromOrder(const PromptKey& key) {
  for (auto& queue : order_) {
    auto it = std::find(queue.begin(), queue.end(), key);
    if (it != queue.end()) {
      queue.erase(it);
      return;
    }
  }
}

void LRUPromptCache::EvictOne() {
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
  Result<CacheEntry> entry = trie_.Pop(key.model, key.tokens);
  if (entry.ok()) Forget(*entry);
}

Status LRUPromptCache::InsertCache(std::string_view model, std::span<const int32_t> tokens,
                                   PromptCache prompt_cache, CacheType cache_type) {
  int64_t nbytes = 0;
  for (const std::shared_ptr<Cache>& layer : prompt_cache) {
    KV_ASSIGN_OR_RETURN(int64_t layer_bytes, layer->Nbytes());
    nbytes += layer_bytes;
  }
  const bool trimmable = CanTrimPromptCache(prompt_cache);

  n_bytes_ += nbytes;
  n_bytes_by_type_[Tier(cache_type)] += nbytes;
  PromptKey key{std::string(model), Slice(tokens, 0, tokens.size())};
  std::optional<CacheEntry> previous =
      trie_.Add(model, tokens, CacheEntry{std::move(prompt_cache), nbytes, cache_type});
  if (previous.has_value()) {
    Forget(*previous);
    RemoveFromOrder(key);
  }
  order_[Tier(cache_type)].push_back(key);

  if (trimmable) {
    // The path was just created, so this cannot fail.
    auto prefixes = trie_.PopPrefixes(model, tokens);
    if (prefixes.ok()) {
      for (const auto& [length, entry] : *prefixes) {
        Forget(entry);
        RemoveFromOrder(PromptKey{key.model, Slice(tokens, 0, static_cast<size_t>(length))});
      }
    }
  }

  if (size() > max_size_ && size() > 0) EvictOne();
  while (n_bytes_ > max_bytes_ && size() > 0) EvictOne();
  return Status::OK();
}

Result<LRUPromptCache::FetchResult> LRUPromptCache::FetchNearestCache(
    std::string_view model, std::span<const int32_t> tokens) const {
  const PromptTrieResult found = trie_.Search(model, tokens);
  if (found.exact.has_value()) {
    return FetchResult{DeepCopy(trie_.Find(model, *found.exact)->prompt_cache), {}};
  }

  const size_t short_length = found.shorter.has_value() ? found.shorter->size() : 0;
  if (found.longer.has_value() && found.common_prefix > static_cast<int64_t>(short_length)) {
    const CacheEntry* entry = trie_.Find(model, *found.longer);
    if (CanTrimPromptCache(entry->prompt_cache)) {
      PromptCache copy = DeepCopy(entry->prompt_cache);
      // Keep at least one token to process: an exact-length cache would
      // leave the model nothing to compute logits from.
      const int64_t prefix = std::min(static_cast<int64_t>(tokens.size()) - 1, found.common_prefix);
      const int64_t num_to_trim = static_cast<int64_t>(found.longer->size()) - prefix;
      KV_RETURN_IF_ERROR(TrimPromptCache(copy, num_to_trim).status());
      return FetchResult{std::move(copy),
                         Slice(tokens, static_cast<size_t>(prefix), tokens.size())};
    }
  }

  if (short_length > 0) {
    return FetchResult{DeepCopy(trie_.Find(model, *found.shorter)->prompt_cache),
                       Slice(tokens, short_length, tokens.size())};
  }
  return FetchResult{std::nullopt, std::vector<int32_t>(tokens.begin(), tokens.end())};
}

void LRUPromptCache::TrimTo(std::optional<int64_t> n_sequences, std::optional<int64_t> n_bytes) {
  const int64_t max_sequences =
      n_sequences.has_value() ? std::max<int64_t>(0, *n_sequences) : kNoLimit;
  const int64_t max_bytes = n_bytes.has_value() ? std::max<int64_t>(0, *n_bytes) : kNoLimit;
  while (size() > max_sequences) EvictOne();
  while (n_bytes_ > max_bytes && size() > 0) EvictOne();
}

std::array<LRUPromptCache::TypeStats, kNumCacheTypes> LRUPromptCache::StatsByType() const {
  std::array<TypeStats, kNumCacheTypes> stats;
  for (size_t i = 0; i < kNumCacheTypes; ++i) {
    stats[i] = {static_cast<int64_t>(order_[i].size()), n_bytes_by_type_[i]};
  }
  return stats;
}

std::vector<PromptKey> LRUPromptCache::Order(CacheType cache_type) const {
  const auto& queue = order_[Tier(cache_type)];
  return std::vector<PromptKey>(queue.begin(), queue.end());
}

std::vector<LRUPromptCache::EntryInfo> LRUPromptCache::Entries() const {
  std::vector<EntryInfo> out;
  trie_.ForEach(
      [&](std::string_view model, std::span<const int32_t> tokens, const CacheEntry& entry) {
        EntryInfo info{std::string(model),
                       std::vector<int32_t>(tokens.begin(), tokens.end()),
                       entry.cache_type,
                       entry.nbytes,
                       {}};
        for (const std::shared_ptr<Cache>& layer : entry.prompt_cache) {
          info.classes.emplace_back(layer->class_name());
        }
        out.push_back(std::move(info));
      });
  return out;
}

}  // namespace kvstore
