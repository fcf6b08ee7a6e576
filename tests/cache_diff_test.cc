// DiffLayers (what kvtool diff reports): layers that line up are measured,
// layers that do not are neither measured nor ever identical.
#include "kvstore/cache_diff.h"

#include "kvstore/kv_cache.h"
#include "testutil.h"

namespace kvstore {
namespace {

// A KVCache holding `tokens` tokens of seeded F16 keys/values [1, 2, tokens, 8].
std::shared_ptr<Cache> KVCacheOf(int64_t tokens, uint64_t seed = 1) {
  auto c = std::make_shared<KVCache>();
  EXPECT_TRUE(c->UpdateAndFetch(testing::RandomArray(DType::kF16, {1, 2, tokens, 8}, seed),
                                testing::RandomArray(DType::kF16, {1, 2, tokens, 8}, seed + 1))
                  .ok());
  return c;
}

TEST(DiffLayersTest, EqualLayersAreIdentical) {
  ASSERT_OK_AND_ASSIGN(LayerDiff d, DiffLayers(KVCacheOf(5), KVCacheOf(5)));
  EXPECT_TRUE(d.comparable);
  EXPECT_TRUE(d.identical);
  EXPECT_TRUE(d.same_meta);
  EXPECT_EQ(d.values, 2u * 2 * 5 * 8);
  EXPECT_EQ(d.max_abs_error, 0.0);
}

TEST(DiffLayersTest, DifferentValuesAreMeasuredNotIdentical) {
  ASSERT_OK_AND_ASSIGN(LayerDiff d, DiffLayers(KVCacheOf(5, 1), KVCacheOf(5, 7)));
  EXPECT_TRUE(d.comparable);
  EXPECT_FALSE(d.identical);
  EXPECT_GT(d.max_abs_error, 0.0);
}

// Same class, different token counts: the shapes differ, so nothing is
// measured and the layers are not identical (identical was true before).
TEST(DiffLayersTest, DifferentTokenCountsAreNotComparableAndNotIdentical) {
  ASSERT_OK_AND_ASSIGN(LayerDiff d, DiffLayers(KVCacheOf(5), KVCacheOf(3)));
  EXPECT_FALSE(d.comparable);
  EXPECT_FALSE(d.identical);
  EXPECT_EQ(d.mismatch, "state.0: F16[1, 2, 5, 8] vs F16[1, 2, 3, 8]");
  EXPECT_EQ(d.values, 0u);
  EXPECT_EQ(d.max_abs_error, 0.0);
  EXPECT_EQ(d.mean_abs_error, 0.0);
}

TEST(DiffLayersTest, DifferentTensorCountsAreNotComparableAndNotIdentical) {
  ASSERT_OK_AND_ASSIGN(LayerDiff d, DiffLayers(KVCacheOf(5), std::make_shared<KVCache>()));  // empty: no tensors
  EXPECT_FALSE(d.comparable);
  EXPECT_FALSE(d.identical);
  EXPECT_EQ(d.mismatch, "2 vs 0 tensors");
}

}  // namespace
}  // namespace kvstore
