// Mixed dtypes behave as in mlx-lm: a write into an existing buffer casts to
// the buffer's dtype (MLX slice assignment), a growth or a concatenation
// promotes (F16 + BF16 -> F32), merges cast to the first cache's keys dtype.
// Every expectation below was checked against mlx-lm d78bf58 on MLX 0.32.2 (CPU).
#include <memory>
#include <vector>

#include "cache_testutil.h"
#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"

namespace kvstore::testing {
namespace {

constexpr DType kF16 = DType::kF16;
constexpr DType kBF16 = DType::kBF16;
constexpr DType kF32 = DType::kF32;

Array Cast(const Array& a, DType dtype) { return a.AsType(dtype).value(); }

TEST(CacheDTypeTest, ChunkedUpdateCastsToTheBufferDTypes) {
  ChunkedKVCache c(16);
  ASSERT_OK(c.UpdateAndFetch(KV(1, 2, 3, 8, 1, kF16), KV(1, 2, 3, 8, 2, kF32)));
  const Array k = KV(1, 2, 3, 8, 3, kF16), v = KV(1, 2, 3, 8, 4, kF16);
  ASSERT_OK_AND_ASSIGN(KeysValues out, c.UpdateAndFetch(k, v));
  EXPECT_EQ(c.offset(), 6);
  EXPECT_EQ(out.keys.Describe(), "F16[1, 2, 6, 8]");
  EXPECT_EQ(out.values.Describe(), "F32[1, 2, 6, 8]");
  EXPECT_TRUE(out.keys.Slice(2, 3, 6).ContentEquals(k));
  EXPECT_TRUE(out.values.Slice(2, 3, 6).ContentEquals(Cast(v, kF32)));
}

TEST(CacheDTypeTest, KVCacheCastsInPlaceAndPromotesWhenItGrows) {
  KVCache in_place;
  ASSERT_OK(in_place.UpdateAndFetch(KV(1, 2, 3, 8, 1), KV(1, 2, 3, 8, 2)));
  ASSERT_OK(in_place.UpdateAndFetch(KV(1, 2, 3, 8, 3, kF32), KV(1, 2, 3, 8, 4, kF32)));
  EXPECT_EQ(in_place.keys_buffer().Describe(), "F16[1, 2, 256, 8]");

  // Unaligned growth: cut to 250 rows, append 256 zero rows, promote.
  KVCache grown;
  const Array k0 = KV(1, 2, 250, 8, 1);
  ASSERT_OK(grown.UpdateAndFetch(k0, KV(1, 2, 250, 8, 2)));
  const Array k1 = KV(1, 2, 10, 8, 3, kF32);
  ASSERT_OK_AND_ASSIGN(KeysValues out, grown.UpdateAndFetch(k1, KV(1, 2, 10, 8, 4, kBF16)));
  EXPECT_EQ(grown.offset(), 260);
  EXPECT_EQ(grown.keys_buffer().Describe(), "F32[1, 2, 506, 8]");
  EXPECT_EQ(grown.values_buffer().Describe(), "F32[1, 2, 506, 8]");
  EXPECT_TRUE(out.keys.Slice(2, 0, 250).ContentEquals(Cast(k0, kF32)));
  EXPECT_TRUE(out.keys.Slice(2, 250, 260).ContentEquals(k1));

  KVCache aligned;
  ASSERT_OK(aligned.UpdateAndFetch(KV(1, 2, 256, 8, 1, kF32), KV(1, 2, 256, 8, 2, kF32)));
  ASSERT_OK(aligned.UpdateAndFetch(KV(1, 2, 3, 8, 3, kF16), KV(1, 2, 3, 8, 4, kBF16)));
  EXPECT_EQ(aligned.keys_buffer().Describe(), "F32[1, 2, 512, 8]");
  EXPECT_EQ(aligned.values_buffer().Describe(), "F32[1, 2, 512, 8]");
}

TEST(CacheDTypeTest, BatchKVCacheCastsInPlaceAndPromotesWhenItGrows) {
  BatchKVCache c({1, 0});
  ASSERT_OK(c.UpdateAndFetch(KV(2, 2, 3, 8, 1), KV(2, 2, 3, 8, 2)));
  ASSERT_OK_AND_ASSIGN(KeysValues cast,
                       c.UpdateAndFetch(KV(2, 2, 3, 8, 3, kF32), KV(2, 2, 3, 8, 4, kF32)));
  EXPECT_EQ(cast.keys.dtype(), kF16);
  ASSERT_OK_AND_ASSIGN(KeysValues grown,
                       c.UpdateAndFetch(KV(2, 2, 300, 8, 5, kBF16), KV(2, 2, 300, 8, 6, kF32)));
  EXPECT_EQ(grown.keys.Describe(), "F32[2, 2, 306, 8]");
  EXPECT_EQ(grown.values.Describe(), "F32[2, 2, 306, 8]");
  EXPECT_EQ(c.Nbytes().value(), 2 * (2 * 2 * 518 * 8 * 4));  // 6 rows kept + 512 new, F32
}

TEST(CacheDTypeTest, ConcatenateKVCachePromotes) {
  ConcatenateKVCache c;
  ASSERT_OK(c.UpdateAndFetch(KV(1, 2, 3, 8, 1), KV(1, 2, 3, 8, 2)));
  ASSERT_OK_AND_ASSIGN(KeysValues out,
                       c.UpdateAndFetch(KV(1, 2, 3, 8, 3, kBF16), KV(1, 2, 3, 8, 4, kF32)));
  EXPECT_EQ(out.keys.Describe(), "F32[1, 2, 6, 8]");
  EXPECT_EQ(out.values.Describe(), "F32[1, 2, 6, 8]");
  EXPECT_EQ(c.offset(), 6);
}

TEST(CacheDTypeTest, QuantizedScalesKeepTheFirstKeysDType) {
  QuantizedKVCache c(32, 4);
  ASSERT_OK(c.UpdateAndFetchQuantized(KV(1, 2, 3, 64, 1, kF16), KV(1, 2, 3, 64, 2, kF32)));
  const Array v = KV(1, 2, 3, 64, 4, kBF16);
  ASSERT_OK(c.UpdateAndFetchQuantized(KV(1, 2, 3, 64, 3, kF32), v));
  ASSERT_OK(c.UpdateAndFetchQuantized(KV(1, 2, 300, 64, 5, kF32), KV(1, 2, 300, 64, 6, kBF16)));
  EXPECT_EQ(c.offset(), 306);
  ASSERT_OK_AND_ASSIGN(CacheState st, c.State());
  for (int kv = 0; kv < 2; ++kv) {
    EXPECT_EQ(st[kv][0].array().Describe(), "U32[1, 2, 306, 8]");
    EXPECT_EQ(st[kv][1].array().Describe(), "F16[1, 2, 306, 2]");
    EXPECT_EQ(st[kv][2].array().Describe(), "F16[1, 2, 306, 2]");
  }
  ASSERT_OK_AND_ASSIGN(QuantizedArray qv, Quantize(v, QuantizeOptions{32, 4}));
  EXPECT_TRUE(st[1][1].array().Slice(2, 3, 6).ContentEquals(Cast(qv.scales, kF16)));
  // 518 rows: 6 kept, 512 appended.
  EXPECT_EQ(c.Nbytes().value(), 2 * (2 * 518 * (8 * 4 + 2 * 2 + 2 * 2)));

  QuantizedKVCache f32_keys(32, 4);
  ASSERT_OK(f32_keys.UpdateAndFetchQuantized(KV(1, 2, 3, 64, 1, kF32), KV(1, 2, 3, 64, 2, kF16)));
  ASSERT_OK_AND_ASSIGN(CacheState st32, f32_keys.State());
  EXPECT_EQ(st32[1][1].array().dtype(), kF32);
}

TEST(CacheDTypeTest, RotatingKVCacheCastsInPlaceAndPromotesOnConcatenation) {
  RotatingKVCache c(8, 2);
  ASSERT_OK(c.UpdateAndFetch(KV(1, 2, 3, 8, 1), KV(1, 2, 3, 8, 2)));
  ASSERT_OK(c.UpdateAndFetch(KV(1, 2, 1, 8, 3, kF32), KV(1, 2, 1, 8, 4, kF32)));  // grows to 8 rows
  EXPECT_EQ(c.keys_buffer().Describe(), "F32[1, 2, 8, 8]");
  EXPECT_EQ(c.idx(), 4);
  ASSERT_OK(c.UpdateAndFetch(KV(1, 2, 1, 8, 5, kBF16), KV(1, 2, 1, 8, 6, kBF16)));
  EXPECT_EQ(c.keys_buffer().dtype(), kF32);
  ASSERT_OK(c.UpdateAndFetch(KV(1, 2, 3, 8, 7, kF16), KV(1, 2, 3, 8, 8, kBF16)));
  EXPECT_EQ(c.keys_buffer().Describe(), "F32[1, 2, 8, 8]");
  EXPECT_EQ(c.values_buffer().Describe(), "F32[1, 2, 8, 8]");
  EXPECT_EQ(c.offset(), 8);
  EXPECT_EQ(c.idx(), 8);
}

// Merging a (F16 keys, F32 values) and b (F32 keys, BF16 values) gives F16
// keys and values: upstream allocates both with the first keys dtype.
template <typename Batch, typename Single>
void ExpectMergeCastsToTheFirstKeysDType(Single a, Single b) {
  ASSERT_OK(a.UpdateAndFetch(KV(1, 2, 3, 8, 1, kF16), KV(1, 2, 3, 8, 2, kF32)));
  const Array bv = KV(1, 2, 5, 8, 4, kBF16);
  ASSERT_OK(b.UpdateAndFetch(KV(1, 2, 5, 8, 3, kF32), bv));
  const std::vector<const Cache*> both = {&a, &b};
  ASSERT_OK_AND_ASSIGN(auto merged, Batch::Merge(both));
  ASSERT_OK_AND_ASSIGN(CacheState st, merged->State());
  EXPECT_EQ(st[0].array().Describe(), "F16[2, 2, 5, 8]");
  EXPECT_EQ(st[1].array().Describe(), "F16[2, 2, 5, 8]");
  EXPECT_TRUE(st[1].array().Slice(0, 1, 2).ContentEquals(Cast(bv, kF16)));
  const Array left_padding = merged->left_padding();
  EXPECT_EQ(left_padding.ToVector<int32_t>(), (std::vector<int32_t>{2, 0}));
}

TEST(CacheDTypeTest, MergesCastToTheFirstKeysDType) {
  ExpectMergeCastsToTheFirstKeysDType<BatchKVCache>(KVCache(), KVCache());
  ExpectMergeCastsToTheFirstKeysDType<BatchRotatingKVCache>(RotatingKVCache(8), RotatingKVCache(8));
}

TEST(CacheDTypeTest, ArraysCacheExtendPromotesAndMergeCasts) {
  ArraysCache a(2), o(2);
  ASSERT_OK(a.SetSlot(0, RandomArray(kF16, {1, 4}, 1)));
  ASSERT_OK(a.SetSlot(1, RandomArray(kF32, {1, 3}, 2)));
  ASSERT_OK(o.SetSlot(0, RandomArray(kBF16, {2, 4}, 3)));
  ASSERT_OK(o.SetSlot(1, RandomArray(kF16, {2, 3}, 4)));
  ASSERT_OK(a.Extend(o));
  EXPECT_EQ(a.slot(0)->Describe(), "F32[3, 4]");
  EXPECT_EQ(a.slot(1)->Describe(), "F32[3, 3]");

  ArraysCache ints(1), halves(1);
  ASSERT_OK(ints.SetSlot(0, Array::Zeros(DType::kI32, {1, 4})));
  ASSERT_OK(halves.SetSlot(0, RandomArray(kF16, {2, 4}, 5)));
  ASSERT_OK(ints.Extend(halves));
  EXPECT_EQ(ints.slot(0)->Describe(), "F16[3, 4]");

  ArraysCache x(1), y(1);
  ASSERT_OK(x.SetSlot(0, RandomArray(kF16, {1, 4}, 6)));
  const Array y0 = RandomArray(kF32, {1, 4}, 7);
  ASSERT_OK(y.SetSlot(0, y0));
  const std::vector<const Cache*> both = {&x, &y};
  ASSERT_OK_AND_ASSIGN(auto merged, ArraysCache::Merge(both));
  EXPECT_EQ(merged->slot(0)->Describe(), "F16[2, 4]");
  EXPECT_TRUE(merged->slot(0)->Slice(0, 1, 2).ContentEquals(Cast(y0, kF16)));
}

}  // namespace
}  // namespace kvstore::testing
