// ServerPromptCache: inserts (checks, memory, the writes queued for the
// persistent tiers), closing those tiers, and the counters.
#include "kvstore/server_prompt_cache.h"

#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/memory_tier.h"
#include "libkvstore/tiers/serving_policy.h"
#include "libkvstore/tiers/tier_writer.h"

namespace kvstore {
namespace {

// The disk writer's key for (model, tenant, tokens): a newer write of it
// replaces a waiting one (never another tenant's).
std::string WriteKey(const ModelFingerprint& model, const TenantSalt* tenant, std::span<const int32_t> tokens) {
  std::string key = model.digest().ToHex() + "/";
  if (tenant != nullptr) key += tenant->key_hex(TenantSalt::Tier::kDisk);
  key += "/";
  key.append(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes());
  return key;
}

size_t Index(RefusalReason reason) { return static_cast<size_t>(reason); }

}  // namespace

Status ServerPromptCache::Check(const PromptScope& scope, std::span<const int32_t> tokens, const PromptCache& cache,
                                std::span<const PromptCacheCheckpoint> checkpoints, bool model_checked) {
  auto refuse = [&](RefusalReason reason, Status why) {
    std::lock_guard<std::mutex> l(mu_);
    counts_.inserts_refused[Index(reason)] += 1;
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
  if (options.memory_entry != nullptr) {
    Link(key, tokens, options.memory_entry, options.cache_type);
  } else if (checked.ok()) {
    Link(key, tokens, std::make_shared<LayersEntry>(CopyLayers(cache)), options.cache_type);
  }
  KV_RETURN_IF_ERROR(checked);
  for (const PromptCacheCheckpoint& cp : options.checkpoints) {
    Link(key, tokens.first(static_cast<size_t>(cp.tokens)),
         std::make_shared<LayersEntry>(CopyLayers(cp.cache)), options.cache_type);
  }
  if (!persist) return Status::OK();
  return Persist(scope, tokens, cache, options.checkpoints);
}

Status ServerPromptCache::Insert(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                 const PromptCache& cache, std::span<const PromptCacheCheckpoint> checkpoints) {
  return Insert(PromptScope{model.digest().ToHex(), model}, tokens, cache, {.checkpoints = checkpoints});
}

Status ServerPromptCache::QueueDiskWrite(const PromptScope& scope, std::span<const int32_t> tokens,
                                         const PromptCache& cache) {
  PromptCacheStore* disk = options_.disk;
  PromptCache copy = CopyLayers(cache);
  const int64_t bytes = CacheBytes(copy);
  return disk_writer_->Submit(
      WriteKey(*scope.model, scope.tenant ? &*scope.tenant : nullptr, tokens), bytes,
      [disk, model = *scope.model, tenant = scope.tenant, tokens = std::vector<int32_t>(tokens.begin(), tokens.end()),
       copy = std::move(copy)] { return disk->Put(model, tokens, copy, tenant ? &*tenant : nullptr); });
}

Status ServerPromptCache::Persist(const PromptScope& scope, std::span<const int32_t> tokens,
                                  const PromptCache& cache, std::span<const PromptCacheCheckpoint> checkpoints) {
  std::shared_lock<std::shared_mutex> l(tiers_mu_);
  if (tiers_closed_) {
    std::lock_guard<std::mutex> m(mu_);
    if (options_.shared != nullptr) counts_.tier(PromptCacheTier::kShared).write_queue_drops += 1;
    if (options_.disk != nullptr) disk_writer_->CountDropped();
    return Status::OK();
  }
  if (options_.disk != nullptr) {
    // Checkpoints first: the whole cache, written last, supersedes those it
    // can serve (PromptCacheStore::Put), as it would not a prefix written
    // after it.
    for (const PromptCacheCheckpoint& cp : checkpoints) {
      KV_RETURN_IF_ERROR(QueueDiskWrite(scope, tokens.first(static_cast<size_t>(cp.tokens)), cp.cache));
    }
    KV_RETURN_IF_ERROR(QueueDiskWrite(scope, tokens, cache));
  }
  if (options_.shared != nullptr) {
    KV_RETURN_IF_ERROR(options_.shared->Insert(*scope.model, tokens, cache, checkpoints,
                                               scope.tenant ? &*scope.tenant : nullptr));
  }
  return Status::OK();
}

void ServerPromptCache::TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes) {
  std::vector<MemoryTier::EntryPtr> removed;  // released after the lock
  std::lock_guard<std::mutex> l(mu_);
  memory_->TrimTo(entries, bytes, removed);
}

void ServerPromptCache::Flush() {
  disk_writer_->Flush();
  std::shared_lock<std::shared_mutex> l(tiers_mu_);
  if (!tiers_closed_ && options_.shared != nullptr) options_.shared->Flush();
}

void ServerPromptCache::ClosePersistentTiers() {
  {
    std::unique_lock<std::shared_mutex> l(tiers_mu_);
    if (tiers_closed_) return;
    tiers_closed_ = true;  // no call uses the tiers from here on but the writes below
  }
  disk_writer_->Close();
  if (options_.shared != nullptr) options_.shared->Flush();
  PromptCacheMetrics last = TierCounters();
  std::unique_lock<std::shared_mutex> l(tiers_mu_);
  closed_tier_counters_ = std::move(last);
}

PromptCacheMetrics ServerPromptCache::TierCounters() const {
  PromptCacheMetrics m;
  if (PromptCacheStore* disk = options_.disk) {
    TierMetrics& d = m.tier(PromptCacheTier::kDisk);
    d.entries = disk->entries();
    d.bytes = disk->bytes();
    d.refused[Index(RefusalReason::kCorrupt)] = disk->corrupt_dropped();
    d.refused[Index(RefusalReason::kWrongKey)] = disk->mismatched_dropped();
    d.refused[Index(RefusalReason::kFingerprint)] = disk->fingerprint_refused();
  }
  if (SharedPromptCache* shared = options_.shared) {
    const SharedPromptCache::Stats s = shared->stats();
    TierMetrics& t = m.tier(PromptCacheTier::kShared);
    t.writes = s.chunks_written + s.snapshots_written;
    t.bytes_written = s.bytes_written;
    t.write_queue_drops = s.inserts_dropped;
    t.write_errors = s.insert_errors;
    t.refused[Index(RefusalReason::kCorrupt)] = s.corrupt;
    t.refused[Index(RefusalReason::kForged)] = s.forged;
    t.refused[Index(RefusalReason::kWrongKey)] = s.mismatched;
  }
  return m;
}

PromptCacheMetrics ServerPromptCache::metrics() const {
  PromptCacheMetrics m;
  {
    std::lock_guard<std::mutex> l(mu_);
    m = counts_;
    TierMetrics& memory = m.tier(PromptCacheTier::kMemory);
    memory.entries = memory_->entries();
    memory.bytes = memory_->bytes();
  }
  {
    std::shared_lock<std::shared_mutex> l(tiers_mu_);
    m.Add(tiers_closed_ ? closed_tier_counters_ : TierCounters());
  }
  if (options_.disk != nullptr) {
    const TierWriter::Stats w = disk_writer_->stats();
    TierMetrics& d = m.tier(PromptCacheTier::kDisk);
    d.writes += w.written;
    d.bytes_written += w.bytes_written;
    d.write_queue_drops += w.dropped;
    d.write_errors += w.errors;
  }
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

ServerPromptCache::MemoryUsage ServerPromptCache::memory_usage() const {
  std::lock_guard<std::mutex> l(mu_);
  return {memory_->entries(), memory_->bytes()};
}

std::array<CacheTypeStats, kNumCacheTypes> ServerPromptCache::StatsByType() const {
  std::lock_guard<std::mutex> l(mu_);
  return memory_->StatsByType();
}

}  // namespace kvstore
