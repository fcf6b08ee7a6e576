// The two memory policies' serving rules (serving_policy.h).
#include "libkvstore/tiers/serving_policy.h"

#include <algorithm>

#include "libkvstore/tiers/memory_index.h"

namespace kvstore {
namespace {

// A server's own LRU: any prefix, one token included, and every hit
// leaves a token; what a persistent tier served is kept in memory.
class ServerPolicy final : public ServingPolicy {
 public:
  MemoryPolicy id() const override { return MemoryPolicy::kServer; }
  std::unique_ptr<MemoryIndex> NewMemoryIndex(int64_t max_entries, int64_t max_bytes) const override {
    return NewLruMemoryIndex(max_entries, max_bytes);
  }
  int64_t MostReused(PromptCacheTier, int64_t query) const override { return std::max<int64_t>(query - 1, 0); }
  int64_t FewestReused(PromptCacheTier) const override { return 1; }
  bool KeepsPersistentHits() const override { return true; }
  bool StoresEmptyKeys() const override { return false; }
};

// mlx-lm's LRUPromptCache in memory, answer for answer: an exact match is
// served whole and a longer entry may be trimmed to nothing; entries of no
// tokens are kept. The persistent tiers' hits leave a token, as
// LRUPromptCache leaves one when it trims a longer entry (mlx_lm.server
// stores a prompt together with its completion, so that is how its own
// cache serves a repeated prompt), and are not kept: mlx_lm.server inserts
// the cache once it has generated.
class MlxLmPolicy final : public ServingPolicy {
 public:
  MemoryPolicy id() const override { return MemoryPolicy::kMlxLm; }
  std::unique_ptr<MemoryIndex> NewMemoryIndex(int64_t max_entries, int64_t max_bytes) const override {
    return NewMlxLmMemoryIndex(max_entries, max_bytes);
  }
  int64_t MostReused(PromptCacheTier tier, int64_t query) const override {
    return tier == PromptCacheTier::kMemory ? query : std::max<int64_t>(query - 1, 0);
  }
  int64_t FewestReused(PromptCacheTier tier) const override { return tier == PromptCacheTier::kMemory ? 0 : 1; }
  bool KeepsPersistentHits() const override { return false; }
  bool StoresEmptyKeys() const override { return true; }
};

}  // namespace

const ServingPolicy& ServingPolicyOf(MemoryPolicy policy) {
  static const ServerPolicy server;
  static const MlxLmPolicy mlx_lm;
  if (policy == MemoryPolicy::kMlxLm) return mlx_lm;
  return server;
}

}  // namespace kvstore
