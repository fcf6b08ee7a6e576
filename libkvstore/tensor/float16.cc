// Bit-level F16/BF16 <-> F32 conversions.
//
// Written with integer arithmetic only so the results do not depend on the
// FPU rounding mode or on compiler flags; the bulk loops are simple enough
// for the compiler to vectorise.
#include "kvstore/float16.h"

#include <bit>

namespace kvstore {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    // Inf or NaN: keep the payload (shifted into the top of the F32 mantissa).
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise into an F32 normal number.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t FloatToHalf(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t abs = f & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {
    if (abs == 0x7F800000u) return sign | 0x7C00u;  // Inf
    // NaN: keep the top payload bits and force it quiet so it stays a NaN.
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: overflow
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = mant * 2^-24.
    if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24 + 0: bits to drop from a 24-bit mantissa
    uint32_t result = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias the exponent and round the mantissa to 10 bits (RNE).
  uint32_t rebased = abs - ((127u - 15u) << 23);
  const uint32_t rem = rebased & 0x1FFFu;
  uint32_t result = rebased >> 13;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;  // may carry into exp
  return static_cast<uint16_t>(sign | result);
}

float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: truncate and force quiet so the payload cannot round to Inf.
    return static_cast<uint16_t>((f >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7FFFu + ((f >> 16) & 1u);
  return static_cast<uint16_t>((f + rounding) >> 16);
}

void HalfToFloat(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}
void FloatToHalf(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}
void BFloat16ToFloat(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
}
void FloatToBFloat16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}

}  // namespace kvstore
