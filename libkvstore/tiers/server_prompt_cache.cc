// ServerPromptCache: the lookup order over the tiers and serving a hit
// (copy, trim to what may be reused). Inserts, writes and counters are in
// server_prompt_cache_insert.cc.
#include "kvstore/server_prompt_cache.h"

#include <chrono>
#include <functional>

#include "kvstore/prompt_cache.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/memory_tier.h"
#include "libkvstore/tiers/serving_policy.h"
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
      policy_(ServingPolicyOf(options.memory_policy)),
      memory_(policy_.NewMemoryTier(options.max_entries, options.max_bytes)),
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
  if (c.reused < policy_.FewestReused()) return std::optional<Hit>();
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

// A hit reuses at most policy_.MostReused(tier, q) tokens. An entry
// holding more (an entry of the whole query, or a longer one) is trimmed to
// that; when its layers cannot be trimmed (a hybrid model's snapshots), the
// tier is asked again for the query less its last token, as mlx-lm's
// server then looks for a shorter checkpoint: so a tier is asked for
// `tokens`, then, only when it offered an entry of the query's whole length
// that could not be served, for tokens.first(q - 1).
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::FromMemory(const std::string& key,
                                                                            std::span<const int32_t> tokens) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  const int64_t most = policy_.MostReused(PromptCacheTier::kMemory, q);
  for (int64_t query : {q, q - 1}) {
    if (query < policy_.FewestReused()) break;
    std::vector<MemoryTier::Candidate> found;
    {
      std::lock_guard<std::mutex> l(mu_);
      found = memory_->Find(key, tokens.first(static_cast<size_t>(query)), most);
    }
    bool whole_query = false;
    for (const MemoryTier::Candidate& c : found) {
      KV_ASSIGN_OR_RETURN(std::optional<Hit> hit, Serve({c.entry, c.length, c.reused}));
      if (hit) return hit;
      whole_query = whole_query || (c.whole_key && c.length > most);
    }
    if (query < q || !whole_query) break;
  }
  return std::optional<Hit>();
}

// A disk or shared hit reusing more than `reused` tokens (the tier is told
// so, and offers nothing shorter), under the same rule as memory's.
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::FromPersistent(
    const std::string& key, std::span<const int32_t> tokens, int64_t reused, PromptCacheTier tier,
    const std::function<Result<std::optional<Loaded>>(size_t)>& load) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  const int64_t most = policy_.MostReused(tier, q);
  for (int64_t query : {q, q - 1}) {
    if (query < 1) break;
    KV_ASSIGN_OR_RETURN(std::optional<Loaded> got, load(static_cast<size_t>(query)));
    const int64_t serves = got ? std::min(got->length, most) : 0;
    if (!got || serves <= reused) break;
    auto entry = std::make_shared<const LayersEntry>(std::move(got->cache));
    KV_ASSIGN_OR_RETURN(auto hit, Serve({entry, got->length, serves, tier, got->foreign_tokens}));
    if (hit) {
      if (policy_.KeepsPersistentHits()) {
        Link(key, tokens.first(static_cast<size_t>(got->length)), entry, CacheType::kAssistant);
      }
      return hit;
    }
    if (got->length <= most) break;
  }
  return std::optional<Hit>();
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Fetch(const PromptScope& scope,
                                                                       std::span<const int32_t> tokens) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t q = static_cast<int64_t>(tokens.size());
  bool asked_disk = false, asked_shared = false, unknown_model = false;
  const TenantSalt* tenant = scope.tenant ? &*scope.tenant : nullptr;
  const std::string key = SaltedMemoryKey(scope.memory_key, tenant);
  Result<std::optional<Hit>> result = [&]() -> Result<std::optional<Hit>> {
    KV_ASSIGN_OR_RETURN(std::optional<Hit> best, FromMemory(key, tokens));
    auto reused = [&] { return best ? best->reused : 0; };
    // The longest prefix wins, whichever tier holds it: a persistent tier is
    // asked whenever it could serve more than the tiers before it.
    if (q == 0 || reused() >= policy_.MostReused(PromptCacheTier::kDisk, q)) return best;
    std::shared_lock<std::shared_mutex> l(tiers_mu_);
    if (tiers_closed_ || (options_.disk == nullptr && options_.shared == nullptr)) return best;
    if (!scope.model) {
      unknown_model = !best;
      return best;
    }
    // The disk's index is in memory: asking it costs a lookup, and it loads
    // only an entry that serves more than `have`.
    if (PromptCacheStore* disk = options_.disk) {
      asked_disk = true;
      const int64_t have = reused();
      KV_ASSIGN_OR_RETURN(auto hit, FromPersistent(key, tokens, have, PromptCacheTier::kDisk,
                                                   [&](size_t n) -> Result<std::optional<Loaded>> {
                                                     KV_ASSIGN_OR_RETURN(auto got, disk->FetchLongestPrefix(
                                                                                       *scope.model, tokens.first(n), tenant, have));
                                                     if (!got) return std::optional<Loaded>();
                                                     return Loaded{std::move(got->cache), got->length, 0};
                                                   }));
      if (hit) best = std::move(hit);
    }
    // The shared tier holds whole chunks only, and costs a round trip: it is
    // asked when a chunk boundary of the query lies past what the others
    // serve (the hit then adds at least that chunk's last token).
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
