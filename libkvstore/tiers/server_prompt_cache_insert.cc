// ServerPromptCache: inserts (checks, memory, the writes queued for the
// persistent tiers), closing those tiers, and the counters.
#include "kvstore/server_prompt_cache.h"

#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/tier.h"
#include "libkvstore/tiers/serving_policy.h"

namespace kvstore {
Status ServerPromptCache::Check(const PromptScope& scope, std::span<const int32_t> tokens, const PromptCache& cache,
                                std::span<const PromptCacheCheckpoint> checkpoints, bool model_checked) {
  auto refuse = [&](RefusalReason reason, Status why) {
    std::lock_guard<std::mutex> l(mu_);
    counts_.inserts_refused[RefusalIndex(reason)] += 1;
    return why;
  };
  if (scope.model) {
    Status s = model_checked ? Status::OK() : scope.model->Check(cache);
    for (size_t i = 0; s.ok() && i < checkpoints.size(); ++i) s = scope.model->Check(checkpoints[i].cache);
    if (!s.ok()) return refuse(RefusalReason::kFingerprint, s);
  }
  Status s = CheckLeafTokens(cache, static_cast<int64_t>(tokens.size())).WithPrefix("ServerPromptCache");
  if (!s.ok()) return refuse(RefusalReason::kTokenCount, s);
  for (const PromptCacheCheckpoint& cp : checkpoints) {
    if (cp.tokens < 1 || cp.tokens > static_cast<int64_t>(tokens.size())) {
      return Status::InvalidArgument("ServerPromptCache: a checkpoint at " + std::to_string(cp.tokens) +
                                     " tokens is outside the prompt");
    }
    s = CheckLeafTokens(cp.cache, cp.tokens)
            .WithPrefix("ServerPromptCache: checkpoint at " + std::to_string(cp.tokens) + " tokens");
    if (!s.ok()) return refuse(RefusalReason::kTokenCount, s);
  }
  return Status::OK();
}

Status ServerPromptCache::Insert(const PromptScope& scope, std::span<const int32_t> tokens, const PromptCache& cache,
                                 const PromptInsertOptions& options) {
  if (tokens.empty() && !policy_.StoresEmptyKeys()) return Status::InvalidArgument("ServerPromptCache: empty token key");
  const bool persist = scope.model.has_value() && !tokens.empty();
  const std::string key = SaltedMemoryKey(scope.memory_key, scope.tenant ? &*scope.tenant : nullptr);
  // What is stored must pass the checks; a binding's own memory entry is
  // stored whatever they say (mlx-lm stores what it is given).
  Status checked;
  if (persist || options.memory_entry == nullptr) checked = Check(scope, tokens, cache, options.checkpoints, options.model_checked);
  TierWrite write{.memory_key = key,
                  .model = scope.model ? &*scope.model : nullptr,
                  .tenant = scope.tenant ? &*scope.tenant : nullptr,
                  .tokens = tokens,
                  .cache = &cache,
                  .checkpoints = options.checkpoints,
                  .entry = options.memory_entry,
                  .cache_type = options.cache_type};
  if (options.memory_entry != nullptr || checked.ok()) {
    KV_RETURN_IF_ERROR(memory_->Store(write));
  }
  KV_RETURN_IF_ERROR(checked);
  if (!persist) return Status::OK();
  // Queued: a closed tier drops the write (counted).
  for (const std::unique_ptr<Tier>& tier : persistent_) KV_RETURN_IF_ERROR(tier->Store(write));
  return Status::OK();
}

Status ServerPromptCache::Insert(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                 const PromptCache& cache, std::span<const PromptCacheCheckpoint> checkpoints) {
  return Insert(PromptScope{model.digest().ToHex(), model}, tokens, cache, {.checkpoints = checkpoints});
}

void ServerPromptCache::TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes) {
  memory_->TrimTo(entries, bytes);
}

void ServerPromptCache::Flush() {
  for (const std::unique_ptr<Tier>& tier : persistent_) tier->Flush();
}

void ServerPromptCache::ClosePersistentTiers() {
  persistent_open_ = false;  // later fetches use memory only
  for (const std::unique_ptr<Tier>& tier : persistent_) tier->Close();
}

PromptCacheMetrics ServerPromptCache::metrics() const {
  PromptCacheMetrics m;
  {
    std::lock_guard<std::mutex> l(mu_);
    m = counts_;
  }
  memory_->AddMetrics(m);
  for (const std::unique_ptr<Tier>& tier : persistent_) tier->AddMetrics(m);
  return m;
}

ServerPromptCache::Stats ServerPromptCache::stats() const {
  const PromptCacheMetrics m = metrics();
  Stats s;
  s.entries = m.tier(PromptCacheTier::kMemory).entries;
  s.bytes = m.tier(PromptCacheTier::kMemory).bytes;
  for (size_t i = 0; i < kNumPromptCacheTiers; ++i) {
    s.hits[i] = m.tiers[i].hits;
    s.tokens_reused += m.tiers[i].tokens_served;
  }
  s.misses = m.fetches - s.hits[0] - s.hits[1] - s.hits[2];
  return s;
}

ServerPromptCache::MemoryUsage ServerPromptCache::memory_usage() const { return memory_->usage(); }

std::array<CacheTypeStats, kNumCacheTypes> ServerPromptCache::StatsByType() const { return memory_->StatsByType(); }

}  // namespace kvstore
