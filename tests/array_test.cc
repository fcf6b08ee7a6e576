#include "kvstore/array.h"

#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "kvstore/float16.h"
#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

Array Iota(DType dtype, const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(ShapeNumel(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  return Array::FromValues<float>(DType::kF32, shape, v).AsType(dtype).value();
}

TEST(ShapeTest, NumelChecksOverflowAndNegatives) {
  EXPECT_EQ(ShapeNumel({}), 1);
  EXPECT_EQ(ShapeNumel({2, 0, 5}), 0);
  EXPECT_EQ(ShapeNumel({2, 3, 4}), 24);
  EXPECT_EQ(ShapeNumel({-1, 3}), -1);
  EXPECT_EQ(ShapeNumel({int64_t{1} << 32, int64_t{1} << 32}), -1);
  EXPECT_EQ(ShapeToString({1, 8, 37}), "[1, 8, 37]");
  EXPECT_EQ(RowMajorStrides({2, 3, 4}), (Strides{12, 4, 1}));
}

TEST(StorageTest, HeapIsAlignedZeroedAndWritable) {
  auto s = Storage::Allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % 64, 0u);
  EXPECT_TRUE(s->writable());
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(s->data()[i], std::byte{0});
}

TEST(StorageTest, WrappedStorageKeepsOwnerAliveAndIsReadOnly) {
  auto owner = std::make_shared<std::vector<std::byte>>(16, std::byte{7});
  std::weak_ptr<std::vector<std::byte>> weak = owner;
  auto s = Storage::WrapReadOnly(owner->data(), owner->size(), owner);
  owner.reset();
  EXPECT_FALSE(weak.expired());
  Array a = Array::FromStorage(DType::kU8, {16}, s, 0);
  s.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(a.At<uint8_t>({3}), 7);
  EXPECT_FALSE(a.storage()->writable());
  EXPECT_THAT(a.CopyFrom(Array::Zeros(DType::kU8, {16})),
              HasCode(StatusCode::kFailedPrecondition, "read-only"));
  a = Array();
  EXPECT_TRUE(weak.expired());
}

TEST(ArrayTest, SliceIsZeroCopyOnEveryAxis) {
  Array a = Iota(DType::kF32, {2, 3, 4});
  Array s0 = a.Slice(0, 1, 2);
  Array s1 = a.Slice(1, 1, 3);
  Array s2 = a.Slice(-1, 2, 4);
  for (const Array* s : {&s0, &s1, &s2}) EXPECT_TRUE(s->SharesStorageWith(a));
  EXPECT_EQ(s0.shape(), (Shape{1, 3, 4}));
  EXPECT_TRUE(s0.is_contiguous());
  EXPECT_FALSE(s1.is_contiguous());
  EXPECT_FALSE(s2.is_contiguous());
  EXPECT_EQ(s1.At<float>({1, 0, 2}), 1 * 12 + 1 * 4 + 2);
  EXPECT_EQ(s2.At<float>({1, 2, 1}), 12 + 8 + 3);
  EXPECT_EQ(s2.ToVector<float>(), (std::vector<float>{2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23}));
  Array empty = a.Slice(1, 3, 3);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.ToBytes().empty());
}

TEST(ArrayTest, ViewOutlivesItsSource) {
  Array view;
  {
    Array a = Iota(DType::kF16, {4, 4});
    view = a.Slice(0, 2, 4);
  }
  EXPECT_EQ(HalfToFloat(view.At<uint16_t>({0, 1})), 9.0f);
}

TEST(ArrayTest, ContiguousAndCloneCopyOnlyWhenNeeded) {
  Array a = Iota(DType::kF32, {3, 4});
  EXPECT_TRUE(a.Contiguous().SharesStorageWith(a));
  EXPECT_FALSE(a.Clone().SharesStorageWith(a));
  Array strided = a.Slice(1, 1, 3);
  Array dense = strided.Contiguous();
  EXPECT_FALSE(dense.SharesStorageWith(a));
  EXPECT_TRUE(dense.is_contiguous());
  EXPECT_TRUE(dense.ContentEquals(strided));
  EXPECT_EQ(dense.ToVector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
}

TEST(ArrayTest, ReshapeViewsContiguousAndCopiesStrided) {
  Array a = Iota(DType::kI32, {2, 6});
  Array r = a.Reshape({3, 4});
  EXPECT_TRUE(r.SharesStorageWith(a));
  EXPECT_EQ(r.At<int32_t>({2, 1}), 9);
  Array s = a.Slice(1, 0, 4).Reshape({8});
  EXPECT_FALSE(s.SharesStorageWith(a));
  EXPECT_EQ(s.ToVector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 6, 7, 8, 9}));
}

TEST(ArrayTest, ConcatenateAlongEachAxis) {
  Array a = Iota(DType::kF32, {2, 2});
  Array b = Iota(DType::kF32, {2, 1});
  const Array cols[] = {a, b};
  Array c = Array::Concatenate(cols, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.ToVector<float>(), (std::vector<float>{0, 1, 0, 2, 3, 1}));
  const Array rows[] = {a, a.Slice(0, 1, 2)};
  EXPECT_EQ(Array::Concatenate(rows, 0).ToVector<float>(),
            (std::vector<float>{0, 1, 2, 3, 2, 3}));
}

TEST(ArrayTest, CopyFromWritesIntoSliceInPlace) {
  Array buf = Array::Zeros(DType::kF32, {2, 4});
  Array before = buf;  // shares storage: the write is visible through it
  ASSERT_OK(buf.Slice(1, 1, 3).CopyFrom(Iota(DType::kF32, {2, 2})));
  EXPECT_EQ(before.ToVector<float>(), (std::vector<float>{0, 0, 1, 0, 0, 2, 3, 0}));
  EXPECT_THAT(buf.CopyFrom(Iota(DType::kF32, {2, 3})),
              HasCode(StatusCode::kInvalidArgument, "does not match"));
  EXPECT_THAT(buf.CopyFrom(Iota(DType::kF16, {2, 4})),
              HasCode(StatusCode::kInvalidArgument, "F16"));
  // Strided source into strided destination.
  Array src = Iota(DType::kF32, {2, 4}).Slice(1, 0, 2);
  ASSERT_OK(buf.Slice(1, 2, 4).CopyFrom(src));
  EXPECT_EQ(buf.ToVector<float>(), (std::vector<float>{0, 0, 0, 1, 0, 2, 4, 5}));
}

TEST(ArrayTest, TakeAndRoll) {
  Array a = Iota(DType::kF32, {2, 4});
  const int64_t idx[] = {3, 0, 0};
  EXPECT_EQ(a.Take(1, idx).ToVector<float>(), (std::vector<float>{3, 0, 0, 7, 4, 4}));
  EXPECT_EQ(a.Roll(1, 1).ToVector<float>(), (std::vector<float>{3, 0, 1, 2, 7, 4, 5, 6}));
  EXPECT_EQ(a.Roll(1, -5).ToVector<float>(), (std::vector<float>{1, 2, 3, 0, 5, 6, 7, 4}));
  EXPECT_EQ(a.Roll(0, 1).ToVector<float>(), (std::vector<float>{4, 5, 6, 7, 0, 1, 2, 3}));
}

TEST(ArrayTest, AsTypeConvertsAndRefusesStorageOnly) {
  Array f = Array::FromValues<float>(DType::kF32, {4},
                                     std::vector<float>{1.5f, -2.75f, 65520.0f, NAN});
  Array h = f.AsType(DType::kF16).value();
  EXPECT_EQ(h.ToVector<uint16_t>(), (std::vector<uint16_t>{0x3E00, 0xC180, 0x7C00,
                                                           h.ToVector<uint16_t>()[3]}));
  EXPECT_TRUE(std::isnan(HalfToFloat(h.ToVector<uint16_t>()[3])));
  Array i = f.AsType(DType::kI32).value();
  EXPECT_EQ(i.ToVector<int32_t>(), (std::vector<int32_t>{1, -2, 65520, 0}));
  Array u8 = Array::FromValues<float>(DType::kF32, {2}, std::vector<float>{300.0f, -1.0f})
                 .AsType(DType::kU8)
                 .value();
  EXPECT_EQ(u8.ToVector<uint8_t>(), (std::vector<uint8_t>{255, 0}));  // saturates
  EXPECT_TRUE(f.AsType(DType::kF32).value().SharesStorageWith(f));
  EXPECT_THAT(f.AsType(DType::kF8E4M3), HasCode(StatusCode::kNotSupported, "F8_E4M3"));
  // Strided input converts its logical elements.
  Array s = Iota(DType::kF32, {2, 3}).Slice(1, 1, 2).AsType(DType::kBF16).value();
  EXPECT_EQ(s.ToVector<uint16_t>(), (std::vector<uint16_t>{FloatToBFloat16(1), FloatToBFloat16(4)}));
}

TEST(ArrayTest, F64ToF16RoundsOnce) {
  // 1 + 2^-11 + 2^-40 is just above the F16 midpoint between 1 and 1+2^-10;
  // rounding via F32 would lose the 2^-40 and tie to even (1.0).
  const double v = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Array d = Array::FromValues<double>(DType::kF64, {1}, std::vector<double>{v});
  EXPECT_EQ(d.AsType(DType::kF16).value().ToVector<uint16_t>()[0], 0x3C01);
}

TEST(ArrayTest, ForEachRunMergesDenseInnerDims) {
  Array a = Iota(DType::kU8, {2, 3, 4});
  int runs = 0;
  a.ForEachRun([&](std::span<const std::byte>) { ++runs; });
  EXPECT_EQ(runs, 1);
  runs = 0;
  a.Slice(1, 0, 2).ForEachRun([&](std::span<const std::byte> r) {
    ++runs;
    EXPECT_EQ(r.size(), 8u);
  });
  EXPECT_EQ(runs, 2);
}

TEST(ArrayTest, FromStorageOverUnalignedBytesCopiesOnContiguous) {
  auto s = Storage::Allocate(9);
  Array a = Array::FromStorage(DType::kU16, {4}, s, 1);
  EXPECT_FALSE(a.is_aligned());
  EXPECT_TRUE(a.Contiguous().is_aligned());
  EXPECT_EQ(a.Describe(), "U16[4]");
}

}  // namespace
}  // namespace kvstore
