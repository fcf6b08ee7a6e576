#include "kvstore/lru_prompt_cache.h"

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

LRUPromptCache::LRUPromptCache(int64_t max_size, int64_t max_bytes) : core_(max_size, max_bytes) {}

void LRUPromptCache::Release(const std::vector<internal::LruPromptCore::Id>& ids) {
  for (internal::LruPromptCore::Id id : ids) entries_.erase(id);
}

Status LRUPromptCache::InsertCache(std::string_view model, std::span<const int32_t> tokens,
                                   PromptCache prompt_cache, CacheType cache_type) {
  int64_t nbytes = 0;
  for (const std::shared_ptr<Cache>& layer : prompt_cache) {
    KV_ASSIGN_OR_RETURN(int64_t layer_bytes, layer->Nbytes());
    nbytes += layer_bytes;
  }
  const internal::LruPromptCore::Entry entry{next_id_++, nbytes, CanTrimPromptCache(prompt_cache), cache_type};
  entries_.emplace(entry.id, CacheEntry{std::move(prompt_cache), nbytes, cache_type});
  Release(core_.Insert(model, tokens, entry));
  return Status::OK();
}

Result<LRUPromptCache::FetchResult> LRUPromptCache::FetchNearestCache(
    std::string_view model, std::span<const int32_t> tokens) const {
  const std::optional<internal::LruPromptCore::Nearest> found = core_.Find(model, tokens);
  if (!found) return FetchResult{std::nullopt, std::vector<int32_t>(tokens.begin(), tokens.end())};
  PromptCache copy = DeepCopy(entries_.at(found->id).prompt_cache);
  if (found->length > found->reused) KV_RETURN_IF_ERROR(TrimPromptCache(copy, found->length - found->reused).status());
  return FetchResult{std::move(copy), Slice(tokens, static_cast<size_t>(found->reused), tokens.size())};
}

void LRUPromptCache::TrimTo(std::optional<int64_t> n_sequences, std::optional<int64_t> n_bytes) {
  Release(core_.TrimTo(n_sequences, n_bytes));
}

std::vector<LRUPromptCache::EntryInfo> LRUPromptCache::Entries() const {
  std::vector<EntryInfo> out;
  core_.ForEach([&](std::string_view model, std::span<const int32_t> tokens, const internal::LruPromptCore::Entry& e) {
    EntryInfo info{std::string(model), std::vector<int32_t>(tokens.begin(), tokens.end()), e.cache_type, e.nbytes,
                   {}};
    for (const std::shared_ptr<Cache>& layer : entries_.at(e.id).prompt_cache) {
      info.classes.emplace_back(layer->class_name());
    }
    out.push_back(std::move(info));
  });
  return out;
}

}  // namespace kvstore
