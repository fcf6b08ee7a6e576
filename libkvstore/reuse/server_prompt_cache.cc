#include "kvstore/server_prompt_cache.h"

#include "libkvstore/reuse/prefix_hash.h"

namespace kvstore {

ServerPromptCache::ServerPromptCache(const ServerPromptCacheOptions& options, PromptCacheStore* store)
    : options_(options), store_(store) {}

// Copies (copy-on-write) and, for an exact match, trims the one token that
// must be left to process; a layer that cannot trim makes it a miss.
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Serve(std::shared_ptr<const PromptCache> cache,
                                                                       int64_t length, int64_t query_length,
                                                                       bool from_disk) {
  Hit hit;
  hit.from_disk = from_disk;
  hit.reused = length;
  for (const auto& layer : *cache) hit.cache.push_back(std::shared_ptr<Cache>(layer->Copy()));
  if (length == query_length) {
    for (const auto& layer : hit.cache) {
      Result<int64_t> t = layer->IsTrimmable() ? layer->Trim(1) : Result<int64_t>(int64_t{0});
      if (!t.ok() || *t != 1) return std::optional<Hit>();
    }
    hit.reused = length - 1;
  }
  return std::optional<Hit>(std::move(hit));
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Fetch(const std::string& model,
                                                                       std::span<const int32_t> tokens) {
  const std::vector<uint64_t> prefix_hash = PrefixHashes(model, tokens);
  std::shared_ptr<const PromptCache> found;
  int64_t length = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t len = tokens.size(); len >= 1 && !found; --len) {
      auto it = entries_.find(prefix_hash[len]);
      if (it == entries_.end()) continue;
      const Entry& e = it->second;
      if (e.model != model || e.tokens.size() != len ||
          !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) {
        continue;
      }
      lru_.splice(lru_.begin(), lru_, e.lru);  // fetching refreshes recency
      found = e.cache;
      length = static_cast<int64_t>(len);
    }
  }
  if (found) {
    KV_ASSIGN_OR_RETURN(auto hit, Serve(found, length, static_cast<int64_t>(tokens.size()), false));
    if (hit) return hit;
  }
  if (store_ != nullptr) {
    KV_ASSIGN_OR_RETURN(auto disk, store_->FetchLongestPrefix(model, tokens));
    if (disk && disk->length > length) {
      auto cache = std::make_shared<const PromptCache>(std::move(disk->cache));
      return Serve(cache, disk->length, static_cast<int64_t>(tokens.size()), true);
    }
  }
  return std::optional<Hit>();
}

Status ServerPromptCache::Insert(const std::string& model, std::span<const int32_t> tokens, const PromptCache& cache) {
  if (tokens.empty()) return Status::InvalidArgument("ServerPromptCache: empty token key");
  auto copy = std::make_shared<PromptCache>();
  int64_t bytes = 0;
  for (const auto& layer : cache) {
    copy->push_back(std::shared_ptr<Cache>(layer->Copy()));
    KV_ASSIGN_OR_RETURN(int64_t b, layer->Nbytes());
    bytes += b;
  }
  const uint64_t h = KeyHash(model, tokens);
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(h);
    if (it != entries_.end()) {
      bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
    lru_.push_front(h);
    entries_[h] = Entry{model, std::vector<int32_t>(tokens.begin(), tokens.end()), copy, bytes, lru_.begin()};
    bytes_ += bytes;
    EvictLocked();
  }
  if (store_ != nullptr) KV_RETURN_IF_ERROR(store_->Put(model, tokens, *copy));
  return Status::OK();
}

void ServerPromptCache::EvictLocked() {
  while (!lru_.empty() && (bytes_ > options_.max_bytes ||
                           static_cast<int64_t>(entries_.size()) > options_.max_entries)) {
    auto it = entries_.find(lru_.back());
    bytes_ -= it->second.bytes;
    entries_.erase(it);
    lru_.pop_back();
  }
}

ServerPromptCache::Stats ServerPromptCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return Stats{static_cast<int64_t>(entries_.size()), bytes_};
}

}  // namespace kvstore
