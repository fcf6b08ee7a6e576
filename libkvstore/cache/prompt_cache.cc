// Module helpers of mlx-lm's `mlx_lm/models/cache.py` (make_prompt_cache,
// can_trim_prompt_cache, trim_prompt_cache) and `mlx_lm/generate.py`
// (maybe_quantize_kv_cache).
#include "kvstore/prompt_cache.h"

#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"

namespace kvstore {

PromptCache MakePromptCache(int64_t num_layers, std::optional<int64_t> max_kv_size) {
  PromptCache out;
  for (int64_t i = 0; i < num_layers; ++i) {
    if (max_kv_size) {
      out.push_back(std::make_shared<RotatingKVCache>(*max_kv_size, 4));
    } else {
      out.push_back(std::make_shared<KVCache>());
    }
  }
  return out;
}

bool CanTrimPromptCache(std::span<const std::shared_ptr<Cache>> cache) {
  for (const auto& c : cache) {
    if (!c->IsTrimmable()) return false;
  }
  return true;
}

Result<int64_t> TrimPromptCache(std::span<const std::shared_ptr<Cache>> cache, int64_t n) {
  if (cache.empty() || !CanTrimPromptCache(cache)) return int64_t{0};
  int64_t first = 0;
  for (size_t i = 0; i < cache.size(); ++i) {
    KV_ASSIGN_OR_RETURN(int64_t trimmed, cache[i]->Trim(n));
    if (i == 0) first = trimmed;
  }
  return first;
}

Status MaybeQuantizeKVCache(PromptCache& cache, int64_t quantized_kv_start, int group_size,
                            std::optional<int> bits, QuantizeOptions::Rounding rounding) {
  if (!bits) return Status::OK();
  // Validate everything first so a failure changes nothing.
  for (const auto& c : cache) {
    if (dynamic_cast<const RotatingKVCache*>(c.get()) != nullptr) {
      return Status::NotSupported("maybe_quantize_kv_cache: RotatingKVCache quantization is not supported");
    }
  }
  PromptCache next = cache;
  for (auto& c : next) {
    auto* kv = dynamic_cast<KVCache*>(c.get());
    if (kv == nullptr || kv->offset().value_or(0) < quantized_kv_start) continue;
    KV_ASSIGN_OR_RETURN(auto q, kv->ToQuantized(group_size, *bits, rounding));
    c = std::shared_ptr<Cache>(std::move(q));
  }
  cache = std::move(next);
  return Status::OK();
}

}  // namespace kvstore
