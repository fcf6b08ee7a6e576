// IEEE binary16 (F16) and bfloat16 (BF16) conversions. Part of the public
// API: an Array of dtype F16 or BF16 holds these bit patterns, and callers
// fill and read such arrays with these functions.
//
// Float -> 16-bit conversions round to nearest, ties to even; overflow gives
// +-Inf; NaN stays NaN (quiet, sign kept); subnormals are produced and read
// exactly. 16-bit -> float is exact. Both directions are tested over all
// 65,536 bit patterns. The bulk versions give the same bits as the scalar
// ones (plain loops the compiler vectorises; no FPU rounding-mode dependence).
//
// Thread safety: pure functions.
#ifndef KVSTORE_FLOAT16_H_
#define KVSTORE_FLOAT16_H_

#include <cstddef>
#include <cstdint>

namespace kvstore {

float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

// Bulk conversions of n elements; src and dst must not overlap.
void HalfToFloat(const uint16_t* src, float* dst, size_t n);
void FloatToHalf(const float* src, uint16_t* dst, size_t n);
void BFloat16ToFloat(const uint16_t* src, float* dst, size_t n);
void FloatToBFloat16(const float* src, uint16_t* dst, size_t n);

}  // namespace kvstore

#endif  // KVSTORE_FLOAT16_H_
