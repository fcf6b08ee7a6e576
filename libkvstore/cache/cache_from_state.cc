// CacheFromState: mlx-lm's `Class.from_state` for every class we know. Like
// Python it builds a default object, then assigns state, then meta_state.
#include <array>

#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"

namespace kvstore {
namespace {

constexpr std::array<std::string_view, 10> kClasses = {
    "KVCache",      "ConcatenateKVCache", "RotatingKVCache", "QuantizedKVCache",
    "ChunkedKVCache", "ArraysCache",      "MambaCache",      "CacheList",
    "BatchKVCache", "BatchRotatingKVCache"};

std::unique_ptr<Cache> NewDefault(std::string_view name) {
  if (name == "KVCache") return std::make_unique<KVCache>();
  if (name == "ConcatenateKVCache") return std::make_unique<ConcatenateKVCache>();
  // Fields a from_state restores come from meta_state; these defaults are
  // what the object holds before that (Python leaves them unset).
  if (name == "RotatingKVCache") return std::make_unique<RotatingKVCache>(0, 0);
  if (name == "QuantizedKVCache") return std::make_unique<QuantizedKVCache>();
  if (name == "ChunkedKVCache") return std::make_unique<ChunkedKVCache>(std::nullopt);
  if (name == "ArraysCache") return std::make_unique<ArraysCache>(0);
  if (name == "MambaCache") return std::make_unique<MambaCache>();
  if (name == "BatchKVCache") return std::make_unique<BatchKVCache>(std::vector<int32_t>{});
  if (name == "BatchRotatingKVCache") {
    return std::make_unique<BatchRotatingKVCache>(0, std::vector<int32_t>{});
  }
  return nullptr;
}

}  // namespace

std::span<const std::string_view> KnownCacheClasses() { return kClasses; }

Result<std::unique_ptr<Cache>> CacheFromState(std::string_view class_name, const CacheState& state,
                                              const MetaState& meta) {
  if (class_name == "CacheList") {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<CacheList> list, CacheList::FromState(state, meta));
    return std::unique_ptr<Cache>(std::move(list));
  }
  std::unique_ptr<Cache> cache = NewDefault(class_name);
  if (cache == nullptr) {
    return Status::NotFound("unknown cache class \"" + std::string(class_name) + "\"");
  }
  KV_RETURN_IF_ERROR(cache->SetState(state));
  KV_RETURN_IF_ERROR(cache->SetMetaState(meta));
  return cache;
}

}  // namespace kvstore
