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

// ArraysCache
ArraysCache::ArraysCache(size_t size, std::vector<int32_t>) : slots_(size) {}
std::unique_ptr<Cache> ArraysCache::Copy() const { return std::make_unique<ArraysCache>(slots_.size()); }
std::unique_ptr<Cache> MambaCache::Copy() const { return std::make_unique<MambaCache>(); }
Status ArraysCache::SetSlot(size_t, std::optional<Array>) { return Todo("ArraysCache"); }
int64_t ArraysCache::batch_size() const { return 0; }
Status ArraysCache::Advance(int64_t) { return Todo("ArraysCache"); }
KV_STUB_COMMON(ArraysCache)
Status ArraysCache::SetLegacyState(const CacheState&) { return Todo("ArraysCache"); }
Result<Mask> ArraysCache::MakeMask(int64_t, const MaskOptions&) const { return Todo("ArraysCache"); }
Status ArraysCache::Prepare(const PrepareArgs&) { return Todo("ArraysCache"); }
Status ArraysCache::Finalize() { return Todo("ArraysCache"); }
Status ArraysCache::Filter(std::span<const int64_t>) { return Todo("ArraysCache"); }
Status ArraysCache::Extend(Cache&) { return Todo("ArraysCache"); }
Result<std::unique_ptr<Cache>> ArraysCache::Extract(int64_t) const { return Todo("ArraysCache"); }
Result<std::unique_ptr<ArraysCache>> ArraysCache::Merge(std::span<const Cache* const>) { return Todo("ArraysCache"); }

// CacheList
CacheList::CacheList(std::vector<std::shared_ptr<Cache>> children) : children_(std::move(children)) {}
std::unique_ptr<Cache> CacheList::Copy() const { return std::make_unique<CacheList>(children_); }
KV_STUB_COMMON(CacheList)
MetaState CacheList::meta_state() const { return MetaState(""); }
Status CacheList::SetMetaState(const MetaState&) { return Todo("CacheList"); }
Result<std::unique_ptr<CacheList>> CacheList::FromState(const CacheState&, const MetaState&) { return Todo("CacheList"); }
int64_t CacheList::Size() const { return 0; }
bool CacheList::IsTrimmable() const { return false; }
Result<int64_t> CacheList::Trim(int64_t) { return Todo("CacheList"); }
Status CacheList::Prepare(const PrepareArgs&) { return Todo("CacheList"); }
Status CacheList::Finalize() { return Todo("CacheList"); }
Status CacheList::Filter(std::span<const int64_t>) { return Todo("CacheList"); }
Status CacheList::Extend(Cache&) { return Todo("CacheList"); }
Result<std::unique_ptr<Cache>> CacheList::Extract(int64_t) const { return Todo("CacheList"); }
Result<std::unique_ptr<CacheList>> CacheList::Merge(std::span<const Cache* const>) { return Todo("CacheList"); }

// BatchKVCache
BatchKVCache::BatchKVCache(std::vector<int32_t> left_padding) : left_padding_(std::move(left_padding)) {}
std::unique_ptr<Cache> BatchKVCache::Copy() const { return std::make_unique<BatchKVCache>(left_padding_); }
Result<KeysValues> BatchKVCache::UpdateAndFetch(const Array&, const Array&) { return Todo("BatchKVCache"); }
KV_STUB_COMMON(BatchKVCache)
Array BatchKVCache::offsets() const { return Array::FromInt32s(offset_); }
Array BatchKVCache::left_padding() const { return Array::FromInt32s(left_padding_); }
Result<int64_t> BatchKVCache::Trim(int64_t) { return Todo("BatchKVCache"); }
Result<Mask> BatchKVCache::MakeMask(int64_t, const MaskOptions&) const { return Todo("BatchKVCache"); }
Status BatchKVCache::Prepare(const PrepareArgs&) { return Todo("BatchKVCache"); }
Status BatchKVCache::Finalize() { return Todo("BatchKVCache"); }
Status BatchKVCache::Filter(std::span<const int64_t>) { return Todo("BatchKVCache"); }
Status BatchKVCache::Extend(Cache&) { return Todo("BatchKVCache"); }
Result<std::unique_ptr<Cache>> BatchKVCache::Extract(int64_t) const { return Todo("BatchKVCache"); }
Result<std::unique_ptr<BatchKVCache>> BatchKVCache::Merge(std::span<const Cache* const>) { return Todo("BatchKVCache"); }

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
