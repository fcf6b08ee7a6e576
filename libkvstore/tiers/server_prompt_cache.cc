// ServerPromptCache: the lookup order over the tiers and serving a hit
// (copy, trim to what may be reused). Inserts, writes and counters are in
// server_prompt_cache_insert.cc.
#include "kvstore/server_prompt_cache.h"

#include <chrono>
#include <functional>

#include "kvstore/prompt_cache.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/memory_tier.h"
#include "libkvstore/tiers/tier_writer.h"

namespace kvstore {

LayersEntry::LayersEntry(PromptCache layers)
    : layers_(std::move(layers)), bytes_(CacheBytes(layers_)), trimmable_(CanTrimPromptCache(layers_)) {}

PromptCache CopyLayers(const PromptCache& cache) {
  PromptCache out;
  out.reserve(cache.size());
  for (const auto& layer : cache) out.push_back(std::shared_ptr<Cache>(layer->Copy()));
  return out;
}

int64_t CacheBytes(const PromptCache& cache) {
  int64_t bytes = 0;
  for (const auto& layer : cache) bytes += layer->Nbytes().value_or(0);
  return bytes;
}

std::string_view MemoryPolicyName(MemoryPolicy policy) {
  return policy == MemoryPolicy::kMlxLm ? "mlx-lm" : "server";
}

Result<MemoryPolicy> ParseMemoryPolicy(std::string_view name) {
  for (MemoryPolicy p : {MemoryPolicy::kServer, MemoryPolicy::kMlxLm}) {
    if (MemoryPolicyName(p) == name) return p;
  }
  return Status::InvalidArgument("unknown memory policy '" + std::string(name) + "' (expected server or mlx-lm)");
}

// A cache some tier holds for the query: `length` tokens, of which the
// first `reused` would be served.
struct ServerPromptCache::Candidate {
  std::shared_ptr<const MemoryEntry> entry;
  int64_t length = 0;
  int64_t reused = 0;
  PromptCacheTier tier = PromptCacheTier::kMemory;
  int64_t foreign_tokens = 0;
};

ServerPromptCache::ServerPromptCache(const ServerPromptCacheOptions& options)
    : options_(options),
      memory_(options.memory_policy == MemoryPolicy::kMlxLm ? NewMlxLmMemoryTier(options.max_entries, options.max_bytes)
                                                            : NewLruMemoryTier(options.max_entries, options.max_bytes)),
      disk_writer_(std::make_unique<TierWriter>(TierWriter::Options{.max_pending = options.disk_queue_capacity,
                                                                    .max_bytes = options.disk_queue_bytes,
                                                                    .async = options.async_disk_writes})) {}

ServerPromptCache::~ServerPromptCache() {
  disk_writer_->Close();
  // Entries may hold a binding's objects: release them outside the lock.
  std::unique_ptr<MemoryTier> memory;
  {
    std::lock_guard<std::mutex> l(mu_);
    memory = std::move(memory_);
  }
}

// Copies and trims to the tokens that may be reused. Every leaf (CacheList
// children included) must trim exactly and end at `reused`, or it is a
// miss: a CacheList's own count speaks for its last child only. A
// binding's entry is handed back for the binding to copy.
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Serve(const Candidate& c) {
  // The mlx-lm policy serves what mlx-lm does, even a longer entry trimmed
  // to nothing when the query's only token is all it shares.
  if (c.reused < 1 && options_.memory_policy == MemoryPolicy::kServer) return std::optional<Hit>();
  Hit hit;
  hit.tier = c.tier;
  hit.reused = c.reused;
  hit.foreign_tokens = std::min(c.foreign_tokens, c.reused);
  if (const PromptCache* layers = c.entry->layers()) {
    hit.cache = CopyLayers(*layers);
    if (!TrimEveryLeaf(hit.cache, c.length - c.reused, c.reused)) return std::optional<Hit>();
  } else {
    hit.entry = c.entry;
    hit.entry_tokens = c.length;
  }
  return std::optional<Hit>(std::move(hit));
}

void ServerPromptCache::Link(const std::string& key, std::span<const int32_t> tokens,
                             std::shared_ptr<const MemoryEntry> entry, CacheType type) {
  std::vector<MemoryTier::EntryPtr> removed;  // released after the lock
  std::lock_guard<std::mutex> l(mu_);
  memory_->Insert(key, tokens, std::move(entry), type, removed);
}

// Server policy: a cache stored for exactly the query must give its last
// token back; when its layers cannot (a hybrid model's snapshots), each
// tier is asked again for the query less that token, as mlx-lm's server
// then looks for a shorter checkpoint: so a tier is asked for `tokens`,
// then, only when it offered an entry of the query's whole length that
// could not be served, for tokens.first(q - 1). The mlx-lm policy asks
// once and serves what mlx-lm's LRUPromptCache serves.
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::FromMemory(const std::string& key,
                                                                            std::span<const int32_t> tokens) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  const bool server = options_.memory_policy == MemoryPolicy::kServer;
  for (int64_t query : {q, q - 1}) {
    if (server && query < 1) break;
    std::vector<MemoryTier::Candidate> found;
    {
      std::lock_guard<std::mutex> l(mu_);
      found = memory_->Find(key, tokens.first(static_cast<size_t>(query)), q);
    }
    bool whole_query = false;
    for (const MemoryTier::Candidate& c : found) {
      KV_ASSIGN_OR_RETURN(std::optional<Hit> hit, Serve({c.entry, c.length, c.reused}));
      if (hit) return hit;
      whole_query = whole_query || c.whole_key;
    }
    if (!server || query < q || !whole_query) break;
  }
  return std::optional<Hit>();
}

// Server policy: a persistent tier's entry of the query's whole length (a
// chunk boundary at its very end) must give one token back; when its
// layers cannot, the tier is asked again for the query less that token.
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::FromPersistent(
    const std::string& key, std::span<const int32_t> tokens, int64_t reused, PromptCacheTier tier,
    const std::function<Result<std::optional<Loaded>>(size_t)>& load) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  const bool server = options_.memory_policy == MemoryPolicy::kServer;
  for (int64_t query : {q, q - 1}) {
    if (query < 1) break;
    KV_ASSIGN_OR_RETURN(std::optional<Loaded> got, load(static_cast<size_t>(query)));
    const int64_t serves = got ? (server ? std::min(got->length, q - 1) : got->length) : 0;
    if (!got || serves <= reused) break;
    auto entry = std::make_shared<const LayersEntry>(std::move(got->cache));
    KV_ASSIGN_OR_RETURN(auto hit, Serve({entry, got->length, serves, tier, got->foreign_tokens}));
    if (hit) {
      if (server) Link(key, tokens.first(static_cast<size_t>(got->length)), entry, CacheType::kAssistant);
      return hit;
    }
    if (!server || got->length < q) break;
  }
  return std::optional<Hit>();
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Fetch(const PromptScope& scope,
                                                                       std::span<const int32_t> tokens) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t q = static_cast<int64_t>(tokens.size());
  const bool server = options_.memory_policy == MemoryPolicy::kServer;
  bool asked_disk = false, asked_shared = false, unknown_model = false;
  const TenantSalt* tenant = scope.tenant ? &*scope.tenant : nullptr;
  const std::string key = SaltedMemoryKey(scope.memory_key, tenant);
  Result<std::optional<Hit>> result = [&]() -> Result<std::optional<Hit>> {
    KV_ASSIGN_OR_RETURN(std::optional<Hit> best, FromMemory(key, tokens));
    if (q == 0 || (best && !server)) return best;  // mlx-lm: a memory hit is final
    auto reused = [&] { return best ? best->reused : 0; };
    std::shared_lock<std::shared_mutex> l(tiers_mu_);
    if (tiers_closed_ || (options_.disk == nullptr && options_.shared == nullptr)) return best;
    if (!scope.model) {
      unknown_model = !best;
      return best;
    }
    if (PromptCacheStore* disk = options_.disk; disk != nullptr && (!server || reused() < q - 1)) {
      asked_disk = true;
      KV_ASSIGN_OR_RETURN(auto hit, FromPersistent(key, tokens, reused(), PromptCacheTier::kDisk,
                                                   [&](size_t n) -> Result<std::optional<Loaded>> {
                                                     KV_ASSIGN_OR_RETURN(auto got, disk->FetchLongestPrefix(
                                                                                       *scope.model, tokens.first(n), tenant));
                                                     if (!got) return std::optional<Loaded>();
                                                     return Loaded{std::move(got->cache), got->length, 0};
                                                   }));
      if (hit) best = std::move(hit);
    }
    // The shared tier holds whole chunks only: asked when they could serve more.
    if (SharedPromptCache* shared = options_.shared;
        shared != nullptr && q / shared->chunk_tokens() * shared->chunk_tokens() > reused()) {
      asked_shared = true;
      const int64_t have = reused();
      KV_ASSIGN_OR_RETURN(auto hit, FromPersistent(key, tokens, have, PromptCacheTier::kShared,
                                                   [&](size_t n) -> Result<std::optional<Loaded>> {
                                                     KV_ASSIGN_OR_RETURN(auto got, shared->Fetch(*scope.model,
                                                                                                 tokens.first(n), have, tenant));
                                                     if (!got) return std::optional<Loaded>();
                                                     return Loaded{std::move(got->cache), got->tokens,
                                                                   got->foreign_tokens};
                                                   }));
      if (hit) best = std::move(hit);
    }
    return best;
  }();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Count(result.ok() ? *result : std::nullopt, seconds, asked_disk, asked_shared, unknown_model);
  return result;
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Fetch(const ModelFingerprint& model,
                                                                       std::span<const int32_t> tokens) {
  return Fetch(PromptScope{model.digest().ToHex(), model}, tokens);
}

void ServerPromptCache::Count(const std::optional<Hit>& hit, double seconds, bool asked_disk, bool asked_shared,
                              bool unknown_model) {
  const int64_t bytes = !hit ? 0 : hit->entry ? hit->entry->bytes() : CacheBytes(hit->cache);
  std::lock_guard<std::mutex> l(mu_);
  counts_.fetches += 1;
  counts_.unknown_model_fetches += unknown_model ? 1 : 0;
  const bool asked[] = {true, asked_disk, asked_shared};
  for (size_t i = 0; i < kNumPromptCacheTiers; ++i) {
    const bool served = hit && static_cast<size_t>(hit->tier) == i;
    if (asked[i] && !served) counts_.tiers[i].misses += 1;
  }
  if (!hit) {
    counts_.fetch_latency[kNumPromptCacheTiers].Record(seconds);
    return;
  }
  TierMetrics& t = counts_.tier(hit->tier);
  t.hits += 1;
  t.tokens_served += hit->reused;
  t.bytes_served += bytes;
  counts_.fetch_latency[static_cast<size_t>(hit->tier)].Record(seconds);
}

}  // namespace kvstore
