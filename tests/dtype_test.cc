#include "kvstore/dtype.h"

#include "testutil.h"

namespace kvstore {
namespace {

TEST(DTypeTest, NamesRoundTripForEveryDType) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.has_value()) << DTypeName(d);
    EXPECT_EQ(*parsed, d);
  }
}

TEST(DTypeTest, SizesMatchSafetensors) {
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_EQ(DTypeSize(DType::kI16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kU32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_EQ(DTypeSize(DType::kC64), 8u);
  EXPECT_EQ(DTypeName(DType::kF8E5M2), "F8_E5M2");
}

TEST(DTypeTest, ParseIsExactAndCaseSensitive) {
  EXPECT_FALSE(ParseDType("f16").has_value());
  EXPECT_FALSE(ParseDType("F16 ").has_value());
  EXPECT_FALSE(ParseDType("").has_value());
  EXPECT_FALSE(ParseDType("FLOAT16").has_value());
  EXPECT_EQ(ParseDType("F8_E8M0"), DType::kF8E8M0);
}

// What kvtool's --dtype and Python's dtype= accept: one function for both.
TEST(DTypeTest, AliasesAreCaseInsensitive) {
  EXPECT_EQ(ParseDTypeAlias("f16"), DType::kF16);
  EXPECT_EQ(ParseDTypeAlias("BF16"), DType::kBF16);
  EXPECT_EQ(ParseDTypeAlias("bfloat16"), DType::kBF16);
  EXPECT_EQ(ParseDTypeAlias("Float32"), DType::kF32);
  EXPECT_EQ(ParseDTypeAlias("uint64"), DType::kU64);
  EXPECT_EQ(ParseDTypeAlias("f8_e4m3"), DType::kF8E4M3);
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    EXPECT_EQ(ParseDTypeAlias(DTypeName(d)), d) << DTypeName(d);
  }
  EXPECT_FALSE(ParseDTypeAlias("half").has_value());
  EXPECT_FALSE(ParseDTypeAlias("f16 ").has_value());
  EXPECT_FALSE(ParseDTypeAlias("").has_value());
}

TEST(DTypeTest, Categories) {
  EXPECT_TRUE(IsFloating(DType::kBF16));
  EXPECT_FALSE(IsFloating(DType::kF8E4M3));
  EXPECT_TRUE(IsIntegral(DType::kBool));
  EXPECT_TRUE(IsIntegral(DType::kI64));
  EXPECT_FALSE(IsIntegral(DType::kF16));
  EXPECT_FALSE(IsIntegral(DType::kC64));
}

}  // namespace
}  // namespace kvstore
