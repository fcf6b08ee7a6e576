// The leaves of a prompt cache (its layers, with CacheList children in
// their place) as the prompt-reuse tiers see them: how many tokens each
// holds, and trimming each one by an exact count. A CacheList's own Trim
// reports only its last child's count (as mlx-lm's), so a tier that must
// know every layer ends where it claims walks the leaves instead.
#ifndef KVSTORE_LIBKVSTORE_CACHE_CACHE_LEAVES_H_
#define KVSTORE_LIBKVSTORE_CACHE_CACHE_LEAVES_H_

#include <cstdint>
#include <memory>
#include <span>

#include "kvstore/cache.h"
#include "kvstore/status.h"

namespace kvstore {

// OK when every leaf with a token offset holds exactly `tokens` tokens
// (RotatingKVCache: tokens seen, however small its buffer). Leaves without
// a scalar offset (ArraysCache, MambaCache: snapshots of the whole prefix;
// batch caches) are exempt. Otherwise InvalidArgument naming the first
// leaf that differs: "layer 3.1 (KVCache): offset 50 != 100 tokens".
Status CheckLeafTokens(std::span<const std::shared_ptr<Cache>> cache, int64_t tokens);

// Trims every leaf by exactly `cut` tokens (none when cut is 0) and checks
// that each then holds `tokens` (CheckLeafTokens). False when a leaf
// cannot be trimmed, trims another count or ends elsewhere; the leaves may
// then be partly trimmed, so call it on a private copy.
bool TrimEveryLeaf(std::span<const std::shared_ptr<Cache>> cache, int64_t cut, int64_t tokens);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_CACHE_LEAVES_H_
