// Exhaustive checks of the 16-bit float conversions against reference
// implementations written independently (via double arithmetic).
#include "kvstore/float16.h"

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "testutil.h"

namespace kvstore {
namespace {

// Value of a binary16 bit pattern computed from its definition.
double HalfValue(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0x1F) {
    return mant ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  }
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(Float16Test, HalfToFloatIsExactForAll65536Patterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const double ref = HalfValue(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_EQ(std::signbit(f), (h >> 15) != 0) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), ref) << h;
      EXPECT_EQ(std::signbit(f), (h >> 15) != 0) << h;
    }
  }
}

TEST(Float16Test, FloatToHalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const uint16_t back = FloatToHalf(HalfToFloat(bits));
    if ((bits & 0x7C00) == 0x7C00 && (bits & 0x3FF) != 0) {
      // NaN stays NaN with its sign; quiet bit set.
      EXPECT_EQ(back & 0x7C00, 0x7C00) << h;
      EXPECT_NE(back & 0x3FF, 0) << h;
      EXPECT_EQ(back & 0x8000, bits & 0x8000) << h;
    } else {
      EXPECT_EQ(back, bits) << h;
    }
  }
}

// For each pair of adjacent finite halves, the midpoint rounds to the even
// one, and values just either side of it round to the nearer one.
TEST(Float16Test, FloatToHalfRoundsToNearestEvenAtEveryMidpoint) {
  for (uint32_t h = 0; h < 0x7BFF; ++h) {  // positive finite, excluding the max
    const double lo = HalfValue(static_cast<uint16_t>(h));
    const double hi = HalfValue(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (h % 2 == 0) ? h : h + 1;
    EXPECT_EQ(FloatToHalf(mid), even) << h;
    EXPECT_EQ(FloatToHalf(-mid), even | 0x8000) << h;
    EXPECT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), h) << h;
    EXPECT_EQ(FloatToHalf(std::nextafter(mid, 1e9f)), h + 1) << h;
  }
}

TEST(Float16Test, FloatToHalfOverflowUnderflowAndSpecials) {
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // midpoint to "65536" rounds to Inf
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // half of min subnormal: tie to 0
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x3FF, 0);
  // A signalling NaN whose payload lives only in the low bits must not become Inf.
  const float snan = std::bit_cast<float>(0x7F800001u);
  EXPECT_NE(FloatToHalf(snan) & 0x3FF, 0);
}

TEST(BFloat16Test, ExhaustiveRoundTripAndValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = BFloat16ToFloat(bits);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), h << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(f)))) << h;
    } else {
      EXPECT_EQ(FloatToBFloat16(f), bits) << h;
    }
  }
}

TEST(BFloat16Test, RoundsToNearestEvenAtEveryMidpoint) {
  for (uint32_t h = 0; h < 0x7F7F; ++h) {
    const uint32_t mid = (h << 16) | 0x8000u;
    const uint16_t even = (h % 2 == 0) ? h : h + 1;
    EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(mid)), even) << h;
    EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(mid - 1)), h) << h;
    EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(mid + 1)), h + 1) << h;
  }
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // overflow -> Inf
  const float snan = std::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(snan))));
}

TEST(Float16Test, BulkMatchesScalar) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> f(all.size()), g(all.size());
  HalfToFloat(all.data(), f.data(), all.size());
  BFloat16ToFloat(all.data(), g.data(), all.size());
  std::vector<uint16_t> h(all.size()), b(all.size());
  FloatToHalf(f.data(), h.data(), f.size());
  FloatToBFloat16(g.data(), b.data(), g.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(HalfToFloat(all[i])));
    EXPECT_EQ(h[i], FloatToHalf(f[i]));
    EXPECT_EQ(b[i], FloatToBFloat16(g[i]));
  }
}

}  // namespace
}  // namespace kvstore
