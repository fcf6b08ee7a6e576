// What the cache classes tell the prompt-reuse code about themselves:
// CacheClassInfo, DescribeSpec, RowsByPosition / CacheFromRows, children().
#include "kvstore/cache_spec.h"

#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/fingerprint/fingerprint_internal.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;
using testing::Prefill;

TEST(CacheSpecTest, EveryKnownClassHasItsInfo) {
  size_t found = 0;
  for (std::string_view name : KnownCacheClasses()) {
    const CacheClassInfo* info = FindCacheClass(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->name, name);
    EXPECT_NE(FindCacheClass(info->saved_as), nullptr) << name;
    // A class with rows names a class its pieces are saved as.
    const bool rows = info->chunk_rule == ChunkRule::kRows || info->chunk_rule == ChunkRule::kRotatingRows;
    EXPECT_EQ(rows, !info->rows_piece.empty()) << name;
    ++found;
  }
  EXPECT_EQ(found, 10u);
  EXPECT_EQ(FindCacheClass("NoSuchCache"), nullptr);
  EXPECT_EQ(FindCacheClass("MambaCache")->saved_as, "ArraysCache");
  EXPECT_EQ(FindCacheClass("CacheList")->chunk_rule, ChunkRule::kChildren);
  EXPECT_EQ(FindCacheClass("BatchKVCache")->chunk_rule, ChunkRule::kNotChunkable);
}

// Rows read from a cache rebuild a cache of the same class, spec and state.
TEST(CacheSpecTest, RowsRebuildTheCache) {
  std::vector<std::shared_ptr<Cache>> caches = {
      std::make_shared<KVCache>(), std::make_shared<QuantizedKVCache>(32, 4),
      std::make_shared<RotatingKVCache>(64, 4), std::make_shared<ChunkedKVCache>(128)};
  for (const auto& cache : caches) {
    SCOPED_TRACE(std::string(cache->class_name()));
    Prefill(*cache, 5, 5, 1);
    ASSERT_OK_AND_ASSIGN(CacheSpec spec, SpecOfCache(*cache));
    std::optional<TokenRows> rows = cache->RowsByPosition();
    ASSERT_TRUE(rows.has_value());
    EXPECT_EQ(rows->first, 0);
    EXPECT_EQ(rows->count, 5);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Cache> rebuilt, CacheFromRows(cache->class_name(), spec, rows->arrays));
    EXPECT_EQ(rebuilt->offset(), 5);
    ASSERT_OK_AND_ASSIGN(CacheSpec again, SpecOfCache(*rebuilt));
    EXPECT_EQ(CacheSpecDifference(again, spec, "rebuilt"), "");
    std::optional<TokenRows> back = rebuilt->RowsByPosition();
    ASSERT_TRUE(back.has_value());
    ASSERT_EQ(back->arrays.size(), rows->arrays.size());
    for (size_t i = 0; i < rows->arrays.size(); ++i) EXPECT_TRUE(back->arrays[i].ContentEquals(rows->arrays[i]));
  }
}

TEST(CacheSpecTest, CachesWithoutUsableRowsOfferNone) {
  RotatingKVCache window(8, 0);
  Prefill(window, 20, 4, 2);  // has dropped rows
  EXPECT_FALSE(window.RowsByPosition().has_value());
  EXPECT_FALSE(KVCache().RowsByPosition().has_value());  // empty
  ArraysCache arrays(2);
  EXPECT_FALSE(arrays.RowsByPosition().has_value());
  EXPECT_THAT(CacheFromRows("ArraysCache", CacheSpec{}, {}).status(), HasCode(StatusCode::kNotSupported, "rows"));
  EXPECT_THAT(CacheFromRows("NoSuchCache", CacheSpec{}, {}).status(), HasCode(StatusCode::kNotFound, "NoSuchCache"));
}

// A class without a fingerprint rule says so; a CacheList lists children.
TEST(CacheSpecTest, DescribeSpecAndChildren) {
  class Unknown : public ArraysCache {
   public:
    Unknown() : ArraysCache(1) {}
    std::string_view class_name() const override { return "UnknownCache"; }
  };
  EXPECT_THAT(SpecOfCache(Unknown()).status(),
              HasCode(StatusCode::kNotSupported, "no fingerprint rule for class UnknownCache"));
  auto kv = std::make_shared<KVCache>();
  Prefill(*kv, 3, 3, 3);
  CacheList list({kv, kv});
  ASSERT_EQ(list.children().size(), 2u);
  EXPECT_TRUE(kv->children().empty());
  ASSERT_OK_AND_ASSIGN(CacheSpec spec, SpecOfCache(list));
  ASSERT_EQ(spec.children.size(), 2u);
  EXPECT_EQ(spec.children[1].class_name, "KVCache");
  EXPECT_EQ(spec.children[1].kv_heads, 2);
}

}  // namespace
}  // namespace kvstore
