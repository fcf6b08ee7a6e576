// PersistentTier: the closing and counting the disk and shared tiers share.
#include "libkvstore/tiers/tier.h"

namespace kvstore {

std::string TierWriteKey(const TierWrite& write, std::span<const int32_t> tokens) {
  std::string key = write.model->digest().ToHex() + "/";
  if (write.tenant != nullptr) key += write.tenant->key_hex(TenantSalt::Tier::kDisk);
  key += "/";
  key.append(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes());
  return key;
}

PersistentTier::~PersistentTier() { writer_.Close(); }

Result<std::vector<TierHit>> PersistentTier::Find(const TierQuery& query) {
  std::shared_lock<std::shared_mutex> l(mu_);
  if (closed_ || query.tokens.empty()) return std::vector<TierHit>();
  return FindOpen(query);
}

void PersistentTier::Flush() {
  writer_.Flush();
  std::shared_lock<std::shared_mutex> l(mu_);
  if (!closed_) FlushOwn();
}

void PersistentTier::Close() {
  std::call_once(closed_once_, [&] {
    writer_.Close();
    FlushOwn();
    PromptCacheMetrics last;
    AddOwnCounters(last);
    std::unique_lock<std::shared_mutex> l(mu_);
    closed_ = true;
    closed_counters_ = std::move(last);
  });
}

void PersistentTier::AddMetrics(PromptCacheMetrics& m) const {
  {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (closed_) {
      m.Add(closed_counters_);
    } else {
      AddOwnCounters(m);
    }
  }
  AddQueueCounters(writer_.stats(), m);
}

}  // namespace kvstore
