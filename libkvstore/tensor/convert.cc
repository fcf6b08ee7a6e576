#include "libkvstore/tensor/convert.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kvstore/float16.h"

namespace kvstore {
namespace {

// Rounds a double to float with round-to-odd, so that a second rounding to a
// 16-bit float gives the correctly rounded result (no double-rounding error).
float DoubleToFloatRoundToOdd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || std::isinf(f) || static_cast<double>(f) == d) return f;
  // Inexact: take the candidate toward zero and make its last bit odd.
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits = std::bit_cast<uint32_t>(f) | 1u;
  return std::bit_cast<float>(bits);
}

template <typename Int>
Int SaturatingFromDouble(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<Int>::min())) {
    return std::numeric_limits<Int>::min();
  }
  // max() of 64-bit ints is not exactly representable; compare with 2^digits.
  const double limit = std::ldexp(1.0, std::numeric_limits<Int>::digits);
  if (v >= limit) return std::numeric_limits<Int>::max();
  return static_cast<Int>(v);
}

// Loads element i as a value of the widest matching kind.
struct Loaded {
  enum Kind { kSigned, kUnsigned, kFloat } kind;
  int64_t s = 0;
  uint64_t u = 0;
  double f = 0;
  float f32 = 0;        // exact F32 value when the source is F16/BF16/F32
  bool f32_exact = false;
  bool f64_source = false;
};

template <typename T>
T LoadRaw(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

Loaded Load(DType dtype, const std::byte* p) {
  Loaded l{Loaded::kSigned};
  switch (dtype) {
    case DType::kBool: l.kind = Loaded::kUnsigned; l.u = LoadRaw<uint8_t>(p) != 0; break;
    case DType::kU8: l.kind = Loaded::kUnsigned; l.u = LoadRaw<uint8_t>(p); break;
    case DType::kU16: l.kind = Loaded::kUnsigned; l.u = LoadRaw<uint16_t>(p); break;
    case DType::kU32: l.kind = Loaded::kUnsigned; l.u = LoadRaw<uint32_t>(p); break;
    case DType::kU64: l.kind = Loaded::kUnsigned; l.u = LoadRaw<uint64_t>(p); break;
    case DType::kI8: l.s = LoadRaw<int8_t>(p); break;
    case DType::kI16: l.s = LoadRaw<int16_t>(p); break;
    case DType::kI32: l.s = LoadRaw<int32_t>(p); break;
    case DType::kI64: l.s = LoadRaw<int64_t>(p); break;
    case DType::kF16: l.f32 = HalfToFloat(LoadRaw<uint16_t>(p)); l.f32_exact = true; break;
    case DType::kBF16: l.f32 = BFloat16ToFloat(LoadRaw<uint16_t>(p)); l.f32_exact = true; break;
    case DType::kF32: l.f32 = LoadRaw<float>(p); l.f32_exact = true; break;
    case DType::kF64: l.f = LoadRaw<double>(p); l.f64_source = true; break;
    default: break;
  }
  if (l.f32_exact) {
    l.kind = Loaded::kFloat;
    l.f = l.f32;
  } else if (l.f64_source) {
    l.kind = Loaded::kFloat;
  }
  return l;
}

double AsDouble(const Loaded& l) {
  switch (l.kind) {
    case Loaded::kSigned: return static_cast<double>(l.s);
    case Loaded::kUnsigned: return static_cast<double>(l.u);
    case Loaded::kFloat: return l.f;
  }
  return 0;
}

// A float value ready for rounding to a 16-bit float.
float AsFloatFor16(const Loaded& l) {
  if (l.f32_exact) return l.f32;
  return DoubleToFloatRoundToOdd(AsDouble(l));
}

template <typename Int>
Int AsInt(const Loaded& l) {
  switch (l.kind) {
    case Loaded::kSigned: return static_cast<Int>(l.s);
    case Loaded::kUnsigned: return static_cast<Int>(l.u);
    case Loaded::kFloat: return SaturatingFromDouble<Int>(l.f);
  }
  return 0;
}

template <typename T>
void StoreRaw(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

void Store(DType dtype, std::byte* p, const Loaded& l) {
  switch (dtype) {
    case DType::kBool:
      StoreRaw<uint8_t>(p, l.kind == Loaded::kFloat ? (l.f != 0) : (l.s != 0 || l.u != 0));
      break;
    case DType::kU8: StoreRaw(p, AsInt<uint8_t>(l)); break;
    case DType::kU16: StoreRaw(p, AsInt<uint16_t>(l)); break;
    case DType::kU32: StoreRaw(p, AsInt<uint32_t>(l)); break;
    case DType::kU64: StoreRaw(p, AsInt<uint64_t>(l)); break;
    case DType::kI8: StoreRaw(p, AsInt<int8_t>(l)); break;
    case DType::kI16: StoreRaw(p, AsInt<int16_t>(l)); break;
    case DType::kI32: StoreRaw(p, AsInt<int32_t>(l)); break;
    case DType::kI64: StoreRaw(p, AsInt<int64_t>(l)); break;
    case DType::kF16: StoreRaw(p, FloatToHalf(AsFloatFor16(l))); break;
    case DType::kBF16: StoreRaw(p, FloatToBFloat16(AsFloatFor16(l))); break;
    case DType::kF32: StoreRaw(p, l.f32_exact ? l.f32 : static_cast<float>(AsDouble(l))); break;
    case DType::kF64: StoreRaw(p, AsDouble(l)); break;
    default: break;
  }
}

}  // namespace

bool IsConvertible(DType dtype) { return IsFloating(dtype) || IsIntegral(dtype); }

void ConvertElements(DType from, const std::byte* src, DType to, std::byte* dst, size_t n) {
  // Fast paths for the conversions caches do all the time.
  if (from == DType::kF16 && to == DType::kF32) {
    HalfToFloat(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<float*>(dst), n);
    return;
  }
  if (from == DType::kF32 && to == DType::kF16) {
    FloatToHalf(reinterpret_cast<const float*>(src), reinterpret_cast<uint16_t*>(dst), n);
    return;
  }
  if (from == DType::kBF16 && to == DType::kF32) {
    BFloat16ToFloat(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<float*>(dst), n);
    return;
  }
  if (from == DType::kF32 && to == DType::kBF16) {
    FloatToBFloat16(reinterpret_cast<const float*>(src), reinterpret_cast<uint16_t*>(dst), n);
    return;
  }
  const size_t in = DTypeSize(from), out = DTypeSize(to);
  for (size_t i = 0; i < n; ++i) Store(to, dst + i * out, Load(from, src + i * in));
}

}  // namespace kvstore
