// ServerPromptCache: the lookup order over the tiers and serving a hit
// (copy, trim to what may be reused).
#include "kvstore/server_prompt_cache.h"

#include "kvstore/prompt_cache.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/memory_tier.h"

namespace kvstore {

// A cache some tier holds for the query: `length` tokens, of which the
// first `usable` may be reused (fewer when it is longer than the query).
struct ServerPromptCache::Candidate {
  std::shared_ptr<const PromptCache> cache;
  int64_t length = 0;
  int64_t usable = 0;
  PromptCacheTier tier = PromptCacheTier::kMemory;
  int64_t foreign_tokens = 0;

  // What serving it would reuse at best: one token is always left to process.
  int64_t Potential(int64_t query) const { return std::min(usable, query - 1); }
};

ServerPromptCache::ServerPromptCache(const ServerPromptCacheOptions& options)
    : options_(options), memory_(std::make_unique<MemoryTier>(options.max_entries, options.max_bytes)) {}

ServerPromptCache::~ServerPromptCache() = default;

// Copies (copy-on-write) and trims to the tokens that may be reused: to
// the common prefix, leaving at least one token of the query to process.
// Every leaf (CacheList children included) must trim exactly and end at
// `reused`, or it is a miss: a CacheList's own count speaks for its last
// child only.
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Serve(const Candidate& c,
                                                                       std::span<const int32_t> tokens) {
  const int64_t reused = c.Potential(static_cast<int64_t>(tokens.size()));
  if (reused < 1) return std::optional<Hit>();
  Hit hit;
  hit.tier = c.tier;
  hit.reused = reused;
  hit.foreign_tokens = std::min(c.foreign_tokens, reused);
  for (const auto& layer : *c.cache) hit.cache.push_back(std::shared_ptr<Cache>(layer->Copy()));
  if (!TrimEveryLeaf(hit.cache, c.length - reused, reused)) return std::optional<Hit>();
  return std::optional<Hit>(std::move(hit));
}

void ServerPromptCache::Remember(const std::string& key, std::span<const int32_t> tokens, const PromptCache& cache) {
  auto copy = std::make_shared<PromptCache>();
  int64_t bytes = 0;
  for (const auto& layer : cache) {
    copy->push_back(std::shared_ptr<Cache>(layer->Copy()));
    bytes += layer->Nbytes().value_or(0);
  }
  const bool trimmable = CanTrimPromptCache(*copy);
  std::lock_guard<std::mutex> l(mu_);
  memory_->Insert(key, tokens, std::move(copy), bytes, trimmable);
}

void ServerPromptCache::Count(const std::optional<Hit>& hit) {
  std::lock_guard<std::mutex> l(mu_);
  if (!hit) {
    ++stats_.misses;
    return;
  }
  ++stats_.hits[static_cast<int>(hit->tier)];
  stats_.tokens_reused += hit->reused;
}

// A cache stored for exactly the query must give its last token back;
// when its layers cannot (a hybrid model's snapshots), the tiers are asked
// again for the query less that token, as mlx-lm's server then looks for a
// shorter checkpoint. So each tier is asked for `tokens`, then, only when
// it offered an entry of the query's whole length that could not be
// served, for tokens.first(q - 1).
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::FromMemory(const std::string& key,
                                                                            std::span<const int32_t> tokens) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  for (int64_t query : {q, q - 1}) {
    if (query < 1) break;
    MemoryTier::Lookup found;
    {
      std::lock_guard<std::mutex> l(mu_);
      found = memory_->Find(key, tokens.first(static_cast<size_t>(query)));
    }
    // The candidates, the more promising first.
    std::vector<Candidate> candidates;
    if (found.prefix) candidates.push_back({found.prefix->cache, found.prefix->length, found.prefix->length});
    if (found.longer) candidates.push_back({found.longer->cache, found.longer->length, found.longer->common});
    std::sort(candidates.begin(), candidates.end(),
              [&](const Candidate& a, const Candidate& b) { return a.Potential(q) > b.Potential(q); });
    for (const Candidate& c : candidates) {
      KV_ASSIGN_OR_RETURN(std::optional<Hit> hit, Serve(c, tokens));
      if (hit) return hit;
    }
    if (!found.prefix || found.prefix->length < q) break;
  }
  return std::optional<Hit>();
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::FromDisk(const ModelFingerprint& model,
                                                                          std::span<const int32_t> tokens,
                                                                          int64_t reused) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  for (int64_t query : {q, q - 1}) {
    if (query < 1) break;
    KV_ASSIGN_OR_RETURN(auto disk, options_.disk->FetchLongestPrefix(model, tokens.first(static_cast<size_t>(query))));
    if (!disk || std::min(disk->length, q - 1) <= reused) break;
    auto cache = std::make_shared<const PromptCache>(std::move(disk->cache));
    KV_ASSIGN_OR_RETURN(auto hit, Serve({cache, disk->length, disk->length, PromptCacheTier::kDisk}, tokens));
    if (hit) {
      Remember(model.digest().ToHex(), tokens.first(static_cast<size_t>(disk->length)), *cache);
      return hit;
    }
    if (disk->length < q) break;
  }
  return std::optional<Hit>();
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Fetch(const ModelFingerprint& model,
                                                                       std::span<const int32_t> tokens) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  KV_ASSIGN_OR_RETURN(std::optional<Hit> best, FromMemory(model.digest().ToHex(), tokens));
  auto reused = [&] { return best ? best->reused : 0; };
  if (options_.disk != nullptr && reused() < q - 1) {
    KV_ASSIGN_OR_RETURN(auto hit, FromDisk(model, tokens, reused()));
    if (hit) best = std::move(hit);
  }
  SharedPromptCache* shared = options_.shared;
  if (shared != nullptr && q / shared->chunk_tokens() * shared->chunk_tokens() > reused()) {
    // A chunk boundary at the very end of the query must give one token
    // back: when the layers cannot, ask for the boundary before it.
    for (size_t query : {tokens.size(), tokens.size() - 1}) {
      KV_ASSIGN_OR_RETURN(auto got, shared->Fetch(model, tokens.first(query), reused()));
      if (!got) break;
      auto cache = std::make_shared<const PromptCache>(std::move(got->cache));
      KV_ASSIGN_OR_RETURN(auto hit, Serve({cache, got->tokens, got->tokens, PromptCacheTier::kShared,
                                           got->foreign_tokens}, tokens));
      if (hit) {
        Remember(model.digest().ToHex(), tokens.first(static_cast<size_t>(got->tokens)), *cache);
        best = std::move(hit);
        break;
      }
      if (got->tokens < q) break;
    }
  }
  Count(best);
  return best;
}

Status ServerPromptCache::Insert(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                 const PromptCache& cache, std::span<const PromptCacheCheckpoint> checkpoints) {
  if (tokens.empty()) return Status::InvalidArgument("ServerPromptCache: empty token key");
  KV_RETURN_IF_ERROR(model.Check(cache));
  KV_RETURN_IF_ERROR(CheckLeafTokens(cache, static_cast<int64_t>(tokens.size())).WithPrefix("ServerPromptCache"));
  for (const PromptCacheCheckpoint& cp : checkpoints) {
    if (cp.tokens < 1 || cp.tokens > static_cast<int64_t>(tokens.size())) {
      return Status::InvalidArgument("ServerPromptCache: a checkpoint at " + std::to_string(cp.tokens) +
                                     " tokens is outside the prompt");
    }
    KV_RETURN_IF_ERROR(model.Check(cp.cache));
    KV_RETURN_IF_ERROR(CheckLeafTokens(cp.cache, cp.tokens)
                           .WithPrefix("ServerPromptCache: checkpoint at " + std::to_string(cp.tokens) + " tokens"));
  }
  const std::string key = model.digest().ToHex();
  Remember(key, tokens, cache);
  for (const PromptCacheCheckpoint& cp : checkpoints) Remember(key, tokens.first(static_cast<size_t>(cp.tokens)), cp.cache);
  if (options_.disk != nullptr) {
    KV_RETURN_IF_ERROR(options_.disk->Put(model, tokens, cache));
    for (const PromptCacheCheckpoint& cp : checkpoints) {
      KV_RETURN_IF_ERROR(options_.disk->Put(model, tokens.first(static_cast<size_t>(cp.tokens)), cp.cache));
    }
  }
  if (options_.shared != nullptr) KV_RETURN_IF_ERROR(options_.shared->Insert(model, tokens, cache, checkpoints));
  return Status::OK();
}

ServerPromptCache::Stats ServerPromptCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  Stats s = stats_;
  s.entries = memory_->entries();
  s.bytes = memory_->bytes();
  return s;
}

}  // namespace kvstore
