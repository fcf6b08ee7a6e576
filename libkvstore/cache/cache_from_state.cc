// The registry of cache classes: CacheFromState (mlx-lm's `Class.from_state`:
// like Python it builds a default object, then assigns state, then
// meta_state), CacheFromRows, and each class's CacheClassInfo.
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

// What each class tells the prompt-reuse code (cache_spec.h).
constexpr CacheClassInfo kClassInfo[] = {
    {.name = "KVCache", .chunk_rule = ChunkRule::kRows, .attention = true, .saved_as = "KVCache",
     .rows_piece = "KVCache"},
    {.name = "ConcatenateKVCache", .attention = true, .saved_as = "ConcatenateKVCache"},
    {.name = "RotatingKVCache", .chunk_rule = ChunkRule::kRotatingRows, .attention = true, .max_size = true,
     .keep = true, .saved_as = "RotatingKVCache", .rows_piece = "KVCache"},
    {.name = "QuantizedKVCache", .chunk_rule = ChunkRule::kRows, .attention = true, .quantized = true,
     .saved_as = "QuantizedKVCache", .rows_piece = "QuantizedKVCache"},
    {.name = "ChunkedKVCache", .chunk_rule = ChunkRule::kRows, .attention = true, .chunk_size = true,
     .saved_as = "ChunkedKVCache", .rows_piece = "KVCache"},
    {.name = "ArraysCache", .chunk_rule = ChunkRule::kSnapshot, .slots = true, .saved_as = "ArraysCache",
     .saved_layout_by_release = true},
    {.name = "MambaCache", .chunk_rule = ChunkRule::kSnapshot, .slots = true, .required_slots = 2,
     .saved_as = "ArraysCache", .saved_layout_by_release = true},
    {.name = "CacheList", .chunk_rule = ChunkRule::kChildren, .children = true, .saved_as = "CacheList"},
    {.name = "BatchKVCache", .attention = true, .saved_as = "BatchKVCache"},
    {.name = "BatchRotatingKVCache", .attention = true, .max_size = true, .saved_as = "BatchRotatingKVCache"},
};
static_assert(std::size(kClassInfo) == kClasses.size());

}  // namespace

std::span<const std::string_view> KnownCacheClasses() { return kClasses; }

const CacheClassInfo* FindCacheClass(std::string_view class_name) {
  for (const CacheClassInfo& info : kClassInfo) {
    if (info.name == class_name) return &info;
  }
  return nullptr;
}

Result<std::unique_ptr<Cache>> CacheFromRows(std::string_view class_name, const CacheSpec& spec,
                                             std::span<const Array> rows) {
  std::unique_ptr<Cache> cache = NewDefault(class_name);
  if (cache == nullptr) return Status::NotFound("unknown cache class \"" + std::string(class_name) + "\"");
  KV_RETURN_IF_ERROR(cache->RestoreRows(spec, rows));
  return cache;
}

Result<std::unique_ptr<Cache>> CacheFromFullState(std::string_view class_name, const CacheState& state) {
  if (class_name == "CacheList") {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<CacheList> list, CacheList::FromFullState(state));
    return std::unique_ptr<Cache>(std::move(list));
  }
  std::unique_ptr<Cache> cache = NewDefault(class_name);
  if (cache == nullptr) return Status::NotFound("unknown cache class \"" + std::string(class_name) + "\"");
  KV_RETURN_IF_ERROR(cache->SetFullState(state));
  return cache;
}

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
