// Module-level helpers of mlx-lm's cache.py for whole prompt caches.
#ifndef KVSTORE_PROMPT_CACHE_H_
#define KVSTORE_PROMPT_CACHE_H_

#include <cstdint>
#include <optional>
#include <span>

#include "kvstore/cache.h"
#include "kvstore/quantize.h"

namespace kvstore {

// make_prompt_cache for a model without make_cache(): num_layers KVCaches,
// or RotatingKVCache(max_kv_size, keep=4) each when max_kv_size is given.
PromptCache MakePromptCache(int64_t num_layers, std::optional<int64_t> max_kv_size = std::nullopt);

// True when every layer is trimmable (true for an empty list).
bool CanTrimPromptCache(std::span<const std::shared_ptr<Cache>> cache);

// Trims every layer by n when all are trimmable and the list is non-empty;
// returns the first layer's count, else 0.
Result<int64_t> TrimPromptCache(std::span<const std::shared_ptr<Cache>> cache, int64_t n);

// generate.py's maybe_quantize_kv_cache: replaces each top-level KVCache
// whose offset >= quantized_kv_start by its ToQuantized(group_size, bits).
// No-op when bits is nullopt. NotSupported for rotating caches (as upstream).
Status MaybeQuantizeKVCache(PromptCache& cache, int64_t quantized_kv_start, int group_size,
                            std::optional<int> bits,
                            QuantizeOptions::Rounding rounding = QuantizeOptions::Rounding::kCpu);

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_H_
