// TEMPORARY: placeholders for cache classes not implemented yet, so that the
// library links. Each class moves to its own file as it lands.
#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"

namespace kvstore {
namespace {
Status Todo(std::string_view what) { return Status::NotSupported(std::string(what) + ": not implemented yet"); }
}  // namespace

#define KV_STUB_COMMON(C)                                                              \
  Result<CacheState> C::State() const { return Todo(#C); }                             \
  Status C::SetState(const CacheState&) { return Todo(#C); }                           \
  bool C::Empty() const { return true; }                                               \
  Result<int64_t> C::Nbytes() const { return Todo(#C); }

// BatchRotatingKVCache
BatchRotatingKVCache::BatchRotatingKVCache(int64_t max_size, std::vector<int32_t> left_padding)
    : max_size_(max_size), left_padding_(std::move(left_padding)) {}
std::unique_ptr<Cache> BatchRotatingKVCache::Copy() const { return std::make_unique<BatchRotatingKVCache>(max_size_, left_padding_); }
Result<KeysValues> BatchRotatingKVCache::UpdateAndFetch(const Array&, const Array&) { return Todo("BatchRotatingKVCache"); }
KV_STUB_COMMON(BatchRotatingKVCache)
MetaState BatchRotatingKVCache::meta_state() const { return MetaState(""); }
Status BatchRotatingKVCache::SetMetaState(const MetaState&) { return Todo("BatchRotatingKVCache"); }
Array BatchRotatingKVCache::offsets() const { return Array::FromInt32s(offset_); }
Array BatchRotatingKVCache::left_padding() const { return Array::FromInt32s(left_padding_); }
int64_t BatchRotatingKVCache::Size() const { return 0; }
Result<int64_t> BatchRotatingKVCache::Trim(int64_t) { return Todo("BatchRotatingKVCache"); }
Result<Mask> BatchRotatingKVCache::MakeMask(int64_t, const MaskOptions&) const { return Todo("BatchRotatingKVCache"); }
Status BatchRotatingKVCache::Prepare(const PrepareArgs&) { return Todo("BatchRotatingKVCache"); }
Status BatchRotatingKVCache::Finalize() { return Todo("BatchRotatingKVCache"); }
Status BatchRotatingKVCache::Filter(std::span<const int64_t>) { return Todo("BatchRotatingKVCache"); }
Status BatchRotatingKVCache::Extend(Cache&) { return Todo("BatchRotatingKVCache"); }
Result<std::unique_ptr<Cache>> BatchRotatingKVCache::Extract(int64_t) const { return Todo("BatchRotatingKVCache"); }
Result<std::unique_ptr<BatchRotatingKVCache>> BatchRotatingKVCache::Merge(std::span<const Cache* const>) { return Todo("BatchRotatingKVCache"); }

}  // namespace kvstore
