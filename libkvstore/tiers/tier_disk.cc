// The disk tier: a PromptCacheStore, its writes queued on a TierWriter.
#include <utility>

#include "libkvstore/tiers/tier.h"

namespace kvstore {

namespace {

class DiskTier final : public PersistentTier {
 public:
  DiskTier(std::shared_ptr<PromptCacheStore> store, const TierWriter::Options& writes)
      : PersistentTier(writes), store_(std::move(store)) {}

  PromptCacheTier id() const override { return PromptCacheTier::kDisk; }

  // Checkpoints first: the whole cache, written last, supersedes those it
  // can serve (PromptCacheStore::Put), as it would not a prefix written
  // after it.
  Status Store(const TierWrite& write) override {
    for (const PromptCacheCheckpoint& cp : write.checkpoints) {
      KV_RETURN_IF_ERROR(Queue(write, write.tokens.first(static_cast<size_t>(cp.tokens)), cp.cache));
    }
    return Queue(write, write.tokens, *write.cache);
  }

 private:
  // The index is in memory: asking costs a lookup, and only an entry
  // serving more than query.have is read.
  Result<std::vector<TierHit>> FindOpen(const TierQuery& query) override {
    KV_ASSIGN_OR_RETURN(std::optional<PromptCacheStore::Hit> got,
                        store_->FetchLongestPrefix(*query.model, query.tokens, query.tenant, query.have));
    if (!got) return std::vector<TierHit>();
    const int64_t reused = std::min(got->length, query.most);
    auto entry = std::make_shared<const LayersEntry>(std::move(got->cache));
    return std::vector<TierHit>{{std::move(entry), got->length, reused}};
  }

  void AddOwnCounters(PromptCacheMetrics& m) const override {
    TierMetrics& d = m.tier(PromptCacheTier::kDisk);
    d.entries += store_->entries();
    d.bytes += store_->bytes();
    d.refused[RefusalIndex(RefusalReason::kCorrupt)] += store_->corrupt_dropped();
    d.refused[RefusalIndex(RefusalReason::kWrongKey)] += store_->mismatched_dropped();
    d.refused[RefusalIndex(RefusalReason::kFingerprint)] += store_->fingerprint_refused();
  }

  void AddQueueCounters(const TierWriter::Stats& w, PromptCacheMetrics& m) const override {
    TierMetrics& d = m.tier(PromptCacheTier::kDisk);
    d.writes += w.written;
    d.bytes_written += w.bytes_written;
    d.write_queue_drops += w.dropped;
    d.write_errors += w.errors;
  }

  Status Queue(const TierWrite& write, std::span<const int32_t> tokens, const PromptCache& cache) {
    PromptCache copy = CopyLayers(cache);
    const int64_t bytes = CacheBytes(copy);
    std::optional<TenantSalt> tenant;
    if (write.tenant != nullptr) tenant = *write.tenant;
    return writer().Submit(TierWriteKey(write, tokens), bytes,
                           [store = store_, model = *write.model, tenant = std::move(tenant),
                            tokens = std::vector<int32_t>(tokens.begin(), tokens.end()), copy = std::move(copy)] {
                             return store->Put(model, tokens, copy, tenant ? &*tenant : nullptr);
                           });
  }

  const std::shared_ptr<PromptCacheStore> store_;
};

}  // namespace

std::unique_ptr<Tier> NewDiskTier(std::shared_ptr<PromptCacheStore> store, const TierWriter::Options& writes) {
  return std::make_unique<DiskTier>(std::move(store), writes);
}

}  // namespace kvstore
