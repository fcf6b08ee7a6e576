#include "kvstore/quantize.h"

#include <cmath>

#include "kvstore/float16.h"
#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

Array Row(const std::vector<float>& v) {
  return Array::FromValues<float>(DType::kF32, {1, static_cast<int64_t>(v.size())}, v);
}

// A group worked through by hand with MLX's CPU affine kernel
// (`mlx/backend/cpu/quantized.cpp`): x_k = (k - 8) * 0.25, k = 0..31, group 32.
std::vector<float> WorkedGroup() {
  std::vector<float> v(32);
  for (int k = 0; k < 32; ++k) v[k] = static_cast<float>(k - 8) * 0.25f;
  return v;
}

TEST(QuantizeTest, WorkedExampleBitExact) {
  const Array w = Row(WorkedGroup());
  ASSERT_OK_AND_ASSIGN(QuantizedArray q4, Quantize(w, {32, 4, QuantizeOptions::Rounding::kCpu}));
  EXPECT_EQ(q4.packed.ToVector<uint32_t>(), (std::vector<uint32_t>{0xbccddeef, 0x8899aabb, 0x44556677, 0x00112233}));
  EXPECT_EQ(q4.scales.ToVector<float>()[0], 5.75f / -11.0f);
  EXPECT_EQ(q4.biases.ToVector<float>()[0], 5.75f);
  ASSERT_OK_AND_ASSIGN(QuantizedArray q3, Quantize(w, {32, 3, QuantizeOptions::Rounding::kCpu}));
  EXPECT_EQ(q3.packed.ToVector<uint32_t>(), (std::vector<uint32_t>{0x6db76dbf, 0x26db7249, 0x00124a49}));
  ASSERT_OK_AND_ASSIGN(QuantizedArray q8, Quantize(w, {32, 8, QuantizeOptions::Rounding::kCpu}));
  EXPECT_EQ(q8.packed.ToVector<uint32_t>()[0], 0xe6eef7ffu);
  // Stored in F16 the 4-bit scale rounds to -0.52294921875.
  ASSERT_OK_AND_ASSIGN(Array h, w.AsType(DType::kF16));
  ASSERT_OK_AND_ASSIGN(QuantizedArray qh, Quantize(h, {32, 4, QuantizeOptions::Rounding::kCpu}));
  EXPECT_EQ(HalfToFloat(qh.scales.ToVector<uint16_t>()[0]), -0.52294921875f);
  // Dequantizing gives 0.0 exactly at code 11 and at most half a step of error.
  ASSERT_OK_AND_ASSIGN(Array d, Dequantize(q4, 32, 4));
  const std::vector<float> back = d.ToVector<float>();
  EXPECT_EQ(back[8], 0.0f);
  for (int k = 0; k < 32; ++k) EXPECT_LE(std::fabs(back[k] - WorkedGroup()[k]), 0.2614f) << k;
}

// An all-negative group shows the GPU rule (running max starts at 0, ties
// away from zero) against the CPU rule, computed by hand.
TEST(QuantizeTest, GpuRoundingModeMatchesTheMetalKernel) {
  std::vector<float> v(32);
  for (int k = 0; k < 32; ++k) v[k] = k % 2 == 0 ? -2.0f : -1.0f;
  ASSERT_OK_AND_ASSIGN(QuantizedArray cpu, Quantize(Row(v), {32, 4, QuantizeOptions::Rounding::kCpu}));
  ASSERT_OK_AND_ASSIGN(QuantizedArray gpu, Quantize(Row(v), {32, 4, QuantizeOptions::Rounding::kGpu}));
  EXPECT_EQ(cpu.packed.ToVector<uint32_t>()[0], 0xF0F0F0F0u);  // codes 0, 15: s = 1/15
  // GPU: s = 2/15 and (-1 + 2) / s = 7.4999995 in float32 -> codes 0, 7.
  EXPECT_EQ(gpu.packed.ToVector<uint32_t>()[0], 0x70707070u);
  EXPECT_EQ(gpu.scales.ToVector<float>()[0], -2.0f / -15.0f);
  EXPECT_EQ(gpu.biases.ToVector<float>()[0], -2.0f);
}

TEST(QuantizeTest, RoundTripErrorIsBoundedForEveryMode) {
  const Array w = testing::RandomArray(DType::kF32, {4, 256}, 9);
  const std::vector<float> x = w.ToVector<float>();
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int gs : {32, 64, 128}) {
      ASSERT_OK_AND_ASSIGN(QuantizedArray q, Quantize(w, {gs, bits, QuantizeOptions::Rounding::kCpu}));
      EXPECT_EQ(q.packed.dim(-1), 256 * bits / 32);
      ASSERT_OK_AND_ASSIGN(Array d, Dequantize(q, gs, bits));
      const std::vector<float> y = d.ToVector<float>();
      const std::vector<float> scales = q.scales.ToVector<float>();
      for (size_t g = 0; g < x.size() / gs; ++g) {
        // Half a step, plus what the nudged scale leaves outside the code range.
        const float step = std::fabs(scales[g]);
        float hi = x[g * gs], lo = x[g * gs];
        for (int i = 0; i < gs; ++i) {
          hi = std::max(hi, x[g * gs + i]);
          lo = std::min(lo, x[g * gs + i]);
        }
        const float bound = 0.5f * step + std::max(0.0f, (hi - lo) - ((1 << bits) - 1) * step) + 1e-5f;
        for (int i = 0; i < gs; ++i) {
          EXPECT_LE(std::fabs(x[g * gs + i] - y[g * gs + i]), bound) << bits << "/" << gs << " group " << g;
        }
      }
    }
  }
}

TEST(QuantizeTest, RejectsWhatMlxRejects) {
  const Array w = testing::RandomArray(DType::kF32, {2, 64}, 1);
  EXPECT_THAT(Quantize(w, {16, 4}), HasCode(StatusCode::kInvalidArgument, "group size"));
  EXPECT_THAT(Quantize(w, {32, 7}), HasCode(StatusCode::kInvalidArgument, "bits 7"));
  EXPECT_THAT(Quantize(w, {128, 4}), HasCode(StatusCode::kInvalidArgument, "not divisible"));
  EXPECT_THAT(Quantize(Array::Zeros(DType::kF32, {64}), {32, 4}), HasCode(StatusCode::kInvalidArgument, "rank"));
  EXPECT_THAT(Quantize(Array::Zeros(DType::kI32, {2, 64}), {32, 4}), HasCode(StatusCode::kInvalidArgument, "F16"));
  ASSERT_OK_AND_ASSIGN(QuantizedArray q, Quantize(w, {32, 4}));
  EXPECT_THAT(Dequantize(q, 64, 4), HasCode(StatusCode::kInvalidArgument, "does not match"));
  QuantizedArray not_u32 = q;
  not_u32.packed = w;
  EXPECT_THAT(Dequantize(not_u32, 32, 4), HasCode(StatusCode::kInvalidArgument, "U32"));
  QuantizedArray bad = q;
  bad.biases = Array::Zeros(DType::kF32, {2, 3});
  EXPECT_THAT(Dequantize(bad, 32, 4), HasCode(StatusCode::kInvalidArgument, "do not match"));
}

TEST(QuantizeTest, StridedInputQuantizesItsLogicalElements) {
  const Array big = testing::RandomArray(DType::kBF16, {2, 3, 128}, 4);
  const Array view = big.Slice(1, 1, 3);
  ASSERT_OK_AND_ASSIGN(QuantizedArray a, Quantize(view, {64, 4}));
  ASSERT_OK_AND_ASSIGN(QuantizedArray b, Quantize(view.Clone(), {64, 4}));
  EXPECT_TRUE(a.packed.ContentEquals(b.packed));
  EXPECT_TRUE(a.scales.ContentEquals(b.scales));
  EXPECT_EQ(a.scales.dtype(), DType::kBF16);
}

}  // namespace
}  // namespace kvstore
