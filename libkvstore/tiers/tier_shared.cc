// The shared tier: a SharedPromptCache (chunks in a KvBackend, e.g. Redis),
// its writes queued on a TierWriter like the disk's.
#include <utility>

#include "libkvstore/tiers/tier.h"

namespace kvstore {
namespace {

struct CheckpointCopy {
  int64_t tokens;
  PromptCache cache;
};

class SharedTier final : public PersistentTier {
 public:
  SharedTier(std::shared_ptr<SharedPromptCache> shared, const TierWriter::Options& writes)
      : PersistentTier(writes), shared_(std::move(shared)) {}

  PromptCacheTier id() const override { return PromptCacheTier::kShared; }

  // Whole chunks only, and a round trip (bounded by the backend's timeout):
  // worth asking when a chunk boundary of the query lies past `have` (the
  // hit then adds at least that chunk's last token).
  bool CouldServeMore(int64_t query, int64_t have) const override {
    const int64_t chunk = shared_->chunk_tokens();
    return query / chunk * chunk > have;
  }

  // One queued write per insert: its chunks are stored once, with snapshot
  // layers at the checkpoints.
  Status Store(const TierWrite& write) override {
    PromptCache copy = CopyLayers(*write.cache);
    int64_t bytes = CacheBytes(copy);
    std::vector<CheckpointCopy> checkpoints;
    for (const PromptCacheCheckpoint& cp : write.checkpoints) {
      checkpoints.push_back({cp.tokens, CopyLayers(cp.cache)});
      bytes += CacheBytes(checkpoints.back().cache);
    }
    std::optional<TenantSalt> tenant;
    if (write.tenant != nullptr) tenant = *write.tenant;
    return writer().Submit(TierWriteKey(write, write.tokens), bytes,
                           [shared = shared_, model = *write.model, tenant = std::move(tenant),
                            tokens = std::vector<int32_t>(write.tokens.begin(), write.tokens.end()),
                            copy = std::move(copy), checkpoints = std::move(checkpoints)] {
                             std::vector<PromptCacheCheckpoint> at;
                             for (const CheckpointCopy& cp : checkpoints) at.push_back({cp.tokens, cp.cache});
                             return shared->Insert(model, tokens, copy, at, tenant ? &*tenant : nullptr);
                           });
  }

 private:
  Result<std::vector<TierHit>> FindOpen(const TierQuery& query) override {
    KV_ASSIGN_OR_RETURN(std::optional<SharedPromptCache::Hit> got,
                        shared_->Fetch(*query.model, query.tokens, query.have, query.tenant));
    if (!got) return std::vector<TierHit>();
    auto entry = std::make_shared<const LayersEntry>(std::move(got->cache));
    return std::vector<TierHit>{{std::move(entry), got->tokens, std::min(got->tokens, query.most), got->foreign_tokens}};
  }

  // A shared tier opened with a queue of its own (async_insert).
  void FlushOwn() override { shared_->Flush(); }

  // Writes are counted in chunks by the shared tier itself.
  void AddOwnCounters(PromptCacheMetrics& m) const override {
    const SharedPromptCache::Stats s = shared_->stats();
    TierMetrics& t = m.tier(PromptCacheTier::kShared);
    t.writes += s.chunks_written + s.snapshots_written;
    t.bytes_written += s.bytes_written;
    t.write_queue_drops += s.inserts_dropped;
    t.write_errors += s.insert_errors;
    t.refused[RefusalIndex(RefusalReason::kCorrupt)] += s.corrupt;
    t.refused[RefusalIndex(RefusalReason::kForged)] += s.forged;
    t.refused[RefusalIndex(RefusalReason::kWrongKey)] += s.mismatched;
  }

  void AddQueueCounters(const TierWriter::Stats& w, PromptCacheMetrics& m) const override {
    m.tier(PromptCacheTier::kShared).write_queue_drops += w.dropped;
  }

  const std::shared_ptr<SharedPromptCache> shared_;
};

}  // namespace

std::unique_ptr<Tier> NewSharedTier(std::shared_ptr<SharedPromptCache> shared, const TierWriter::Options& writes) {
  return std::make_unique<SharedTier>(std::move(shared), writes);
}

}  // namespace kvstore
