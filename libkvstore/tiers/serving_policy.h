// The serving rules of ServerPromptCache, one object per MemoryPolicy
// (kvstore/server_prompt_cache.h describes both policies): which memory
// tier runs, how many tokens of a query a hit from each tier may reuse, and
// what the coordinator keeps. The coordinator asks its policy and never
// tests which one it runs, so a rule is changed, or a policy added, here.
// Stateless; one shared instance per policy, usable from any thread.
#ifndef KVSTORE_LIBKVSTORE_TIERS_SERVING_POLICY_H_
#define KVSTORE_LIBKVSTORE_TIERS_SERVING_POLICY_H_

#include <cstdint>
#include <memory>

#include "kvstore/prompt_cache_metrics.h"
#include "kvstore/server_prompt_cache.h"

namespace kvstore {

class MemoryIndex;

class ServingPolicy {
 public:
  virtual ~ServingPolicy() = default;

  virtual MemoryPolicy id() const = 0;
  virtual std::unique_ptr<MemoryIndex> NewMemoryIndex(int64_t max_entries, int64_t max_bytes) const = 0;

  // The most of a query's `query` tokens a hit from `tier` may reuse; the
  // rest are processed. A persistent tier's hit leaves at least one token
  // under every policy: an inference server computes the next token's
  // logits from the last token it processes, and mlx-lm's generation
  // cannot start from nothing. A hit holding more is trimmed, or, when it
  // cannot be, the tier is asked again for the query less its last token.
  virtual int64_t MostReused(PromptCacheTier tier, int64_t query) const = 0;
  // The fewest tokens a hit from `tier` must reuse to be served.
  virtual int64_t FewestReused(PromptCacheTier tier) const = 0;
  // Whether a persistent tier's hit is kept in memory.
  virtual bool KeepsPersistentHits() const = 0;
  // Whether a cache of no tokens may be inserted (into memory only).
  virtual bool StoresEmptyKeys() const = 0;
};

// The policy's rules; a reference to a static instance.
const ServingPolicy& ServingPolicyOf(MemoryPolicy policy);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_SERVING_POLICY_H_
