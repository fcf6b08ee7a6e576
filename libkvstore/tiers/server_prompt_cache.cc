// ServerPromptCache: the lookup order over the tiers and serving a hit
// (copy, trim to what may be reused). Inserts, writes and counters are in
// server_prompt_cache_insert.cc.
#include "kvstore/server_prompt_cache.h"

#include <chrono>

#include "kvstore/prompt_cache.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/memory_index.h"
#include "libkvstore/tiers/tier.h"
#include "libkvstore/tiers/serving_policy.h"
#include "libkvstore/tiers/tier_writer.h"

namespace kvstore {

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

namespace {

// A borrowed tier: the caller keeps it open while the cache uses it.
template <typename T>
std::shared_ptr<T> Borrowed(T* p) {
  if (p == nullptr) return nullptr;
  return std::shared_ptr<T>(p, [](T*) {});
}

}  // namespace

Result<std::unique_ptr<ServerPromptCache>> ServerPromptCache::Open(const ServerPromptCacheOptions& options) {
  Env* env = options.env != nullptr ? options.env : Env::Default();
  std::shared_ptr<PromptCacheStore> disk = Borrowed(options.disk);
  if (disk == nullptr && !options.directory.empty()) {
    KV_ASSIGN_OR_RETURN(disk, PromptCacheStore::Open(env, options.directory, options.disk_options));
  }
  std::shared_ptr<SharedPromptCache> shared = Borrowed(options.shared);
  if (shared == nullptr && !options.redis.url.empty()) {
    SharedPromptCacheOptions o = options.shared_options;
    o.async_insert = false;  // the cache's own queue writes it
    // Refused before connecting (an empty secret, a bad chunk size).
    KV_RETURN_IF_ERROR(SharedPromptCache::CheckOptions(o));
    KV_ASSIGN_OR_RETURN(std::unique_ptr<KvBackend> opened, OpenRedisBackend(options.redis));
    std::shared_ptr<KvBackend> backend(std::move(opened));
    o.backend = backend.get();
    KV_ASSIGN_OR_RETURN(std::unique_ptr<SharedPromptCache> tier, SharedPromptCache::Open(std::move(o)));
    // The backend lives as long as the tier.
    shared = std::shared_ptr<SharedPromptCache>(tier.release(), [backend](SharedPromptCache* p) { delete p; });
  }
  return std::unique_ptr<ServerPromptCache>(new ServerPromptCache(options, std::move(disk), std::move(shared)));
}

ServerPromptCache::ServerPromptCache(const ServerPromptCacheOptions& options)
    : ServerPromptCache(options, Borrowed(options.disk), Borrowed(options.shared)) {}

ServerPromptCache::ServerPromptCache(const ServerPromptCacheOptions& options, std::shared_ptr<PromptCacheStore> disk,
                                     std::shared_ptr<SharedPromptCache> shared)
    : options_(options),
      policy_(ServingPolicyOf(options.memory_policy)),
      disk_(std::move(disk)),
      shared_(std::move(shared)),
      models_(std::make_unique<ModelRegistry>(
          ModelRegistry::Options{
              .env = options.env, .directory = options.directory, .shared = shared_.get(), .warn = options.warn})),
      memory_(std::make_unique<MemoryTier>(policy_.NewMemoryIndex(options.max_entries, options.max_bytes))) {
  // Each persistent tier's writes wait in a queue of its own.
  const TierWriter::Options writes{.max_pending = options.write_queue_capacity,
                                   .max_bytes = options.write_queue_bytes,
                                   .async = options.async_writes};
  if (disk_ != nullptr) persistent_.push_back(NewDiskTier(disk_, writes));
  if (shared_ != nullptr) persistent_.push_back(NewSharedTier(shared_, writes));
  persistent_open_ = !persistent_.empty();
}

// Each persistent tier finishes its queued writes as it is destroyed.
ServerPromptCache::~ServerPromptCache() = default;

// Copies and trims to the tokens that may be reused. Every leaf (CacheList
// children included) must trim exactly and end at `reused`, or it is a
// miss: a CacheList's own count speaks for its last child only. A
// binding's entry is handed back for the binding to copy.
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Serve(const Candidate& c) {
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

// A hit reuses at most policy_.MostReused(tier, q) tokens. An entry
// holding more (an entry of the whole query, or a longer one) is trimmed to
// that; when its layers cannot be trimmed (a hybrid model's snapshots), the
// tier is asked again for the query less its last token, as mlx-lm's
// server then looks for a shorter checkpoint: so a tier is asked for
// `tokens`, then, only when it offered an entry holding more than may be
// reused that could not be served, for tokens.first(q - 1).
Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::FromTier(Tier& tier, const std::string& key,
                                                                          const PromptScope& scope,
                                                                          std::span<const int32_t> tokens,
                                                                          int64_t have) {
  const int64_t q = static_cast<int64_t>(tokens.size());
  const int64_t most = policy_.MostReused(tier.id(), q);
  const int64_t fewest = policy_.FewestReused(tier.id());
  have = std::max(have, fewest - 1);
  for (int64_t query : {q, q - 1}) {
    if (query < fewest) break;
    const TierQuery asked{.memory_key = key,
                          .model = scope.model ? &*scope.model : nullptr,
                          .tenant = scope.tenant ? &*scope.tenant : nullptr,
                          .tokens = tokens.first(static_cast<size_t>(query)),
                          .most = most,
                          .have = have};
    KV_ASSIGN_OR_RETURN(std::vector<TierHit> found, tier.Find(asked));
    bool held_more = false;
    for (const TierHit& c : found) {
      const int64_t serves = std::min(c.reused, most);
      if (serves <= have) continue;
      KV_ASSIGN_OR_RETURN(auto hit, Serve({c.entry, c.length, serves, tier.id(), c.foreign_tokens}));
      if (hit) {
        if (tier.id() != PromptCacheTier::kMemory && policy_.KeepsPersistentHits()) {
          KV_RETURN_IF_ERROR(memory_->Store({.memory_key = key,
                                             .tokens = tokens.first(static_cast<size_t>(c.length)),
                                             .entry = c.entry}));
        }
        return hit;
      }
      held_more = held_more || c.length > most;
    }
    if (query < q || !held_more) break;
  }
  return std::optional<Hit>();
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Fetch(const PromptScope& scope,
                                                                       std::span<const int32_t> tokens) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t q = static_cast<int64_t>(tokens.size());
  bool asked[kNumPromptCacheTiers] = {true, false, false};
  bool unknown_model = false;
  const std::string key = SaltedMemoryKey(scope.memory_key, scope.tenant ? &*scope.tenant : nullptr);
  Result<std::optional<Hit>> result = [&]() -> Result<std::optional<Hit>> {
    KV_ASSIGN_OR_RETURN(std::optional<Hit> best, FromTier(*memory_, key, scope, tokens, /*have=*/-1));
    auto reused = [&] { return best ? best->reused : 0; };
    // The longest prefix wins, whichever tier holds it: a persistent tier is
    // asked whenever it could serve more than the tiers before it.
    for (const std::unique_ptr<Tier>& tier : persistent_) {
      if (q == 0 || reused() >= policy_.MostReused(tier->id(), q) || !persistent_open_) break;
      if (!scope.model) {
        unknown_model = !best;
        break;
      }
      if (!tier->CouldServeMore(q, reused())) continue;
      asked[static_cast<size_t>(tier->id())] = true;
      KV_ASSIGN_OR_RETURN(auto hit, FromTier(*tier, key, scope, tokens, reused()));
      if (hit) best = std::move(hit);
    }
    return best;
  }();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Count(result.ok() ? *result : std::nullopt, seconds, asked, unknown_model);
  return result;
}

Result<std::optional<ServerPromptCache::Hit>> ServerPromptCache::Fetch(const ModelFingerprint& model,
                                                                       std::span<const int32_t> tokens) {
  return Fetch(PromptScope{model.digest().ToHex(), model}, tokens);
}

void ServerPromptCache::Count(const std::optional<Hit>& hit, double seconds, const bool asked[kNumPromptCacheTiers],
                              bool unknown_model) {
  const int64_t bytes = !hit ? 0 : hit->entry ? hit->entry->bytes() : CacheBytes(hit->cache);
  std::lock_guard<std::mutex> l(mu_);
  counts_.fetches += 1;
  counts_.unknown_model_fetches += unknown_model ? 1 : 0;
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
