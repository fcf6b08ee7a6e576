// The memory tier: a MemoryIndex under its own lock, and the entries the
// coordinator makes (LayersEntry).
#include <utility>

#include "kvstore/prompt_cache.h"
#include "libkvstore/tiers/memory_index.h"
#include "libkvstore/tiers/tier.h"

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

MemoryTier::MemoryTier(std::unique_ptr<MemoryIndex> index) : index_(std::move(index)) {}

MemoryTier::~MemoryTier() {
  // Entries may hold a binding's objects: released outside the lock.
  std::unique_ptr<MemoryIndex> index;
  std::lock_guard<std::mutex> l(mu_);
  index = std::move(index_);
}

Result<std::vector<TierHit>> MemoryTier::Find(const TierQuery& query) {
  std::lock_guard<std::mutex> l(mu_);
  return index_->Find(std::string(query.memory_key), query.tokens, query.most);
}

void MemoryTier::Insert(std::string_view key, std::span<const int32_t> tokens,
                        std::shared_ptr<const MemoryEntry> entry, CacheType type) {
  std::vector<MemoryIndex::EntryPtr> removed;  // released after the lock
  std::lock_guard<std::mutex> l(mu_);
  index_->Insert(std::string(key), tokens, std::move(entry), type, removed);
}

Status MemoryTier::Store(const TierWrite& write) {
  std::shared_ptr<const MemoryEntry> entry = write.entry;
  if (entry == nullptr) {
    if (write.cache == nullptr) return Status::InvalidArgument("memory tier: nothing to store");
    entry = std::make_shared<LayersEntry>(CopyLayers(*write.cache));
  }
  Insert(write.memory_key, write.tokens, std::move(entry), write.cache_type);
  for (const PromptCacheCheckpoint& cp : write.checkpoints) {
    Insert(write.memory_key, write.tokens.first(static_cast<size_t>(cp.tokens)),
           std::make_shared<LayersEntry>(CopyLayers(cp.cache)), write.cache_type);
  }
  return Status::OK();
}

void MemoryTier::AddMetrics(PromptCacheMetrics& m) const {
  std::lock_guard<std::mutex> l(mu_);
  TierMetrics& memory = m.tier(PromptCacheTier::kMemory);
  memory.entries += index_->entries();
  memory.bytes += index_->bytes();
}

void MemoryTier::TrimTo(std::optional<int64_t> entries, std::optional<int64_t> bytes) {
  std::vector<MemoryIndex::EntryPtr> removed;  // released after the lock
  std::lock_guard<std::mutex> l(mu_);
  index_->TrimTo(entries, bytes, removed);
}

ServerPromptCache::MemoryUsage MemoryTier::usage() const {
  std::lock_guard<std::mutex> l(mu_);
  return {index_->entries(), index_->bytes()};
}

std::array<CacheTypeStats, kNumCacheTypes> MemoryTier::StatsByType() const {
  std::lock_guard<std::mutex> l(mu_);
  return index_->StatsByType();
}

}  // namespace kvstore
