// Element types of kvstore arrays: every dtype the safetensors format names.
//
// The F8 variants and C64 are storage-only: arrays of them can be sliced,
// copied, concatenated, saved and loaded, but not converted or quantized.
#ifndef KVSTORE_DTYPE_H_
#define KVSTORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvstore {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kU64,
  kI64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kC64,  // complex64 (two F32), written by MLX; not in the Hugging Face list
};

inline constexpr int kNumDTypes = static_cast<int>(DType::kC64) + 1;

// Bytes per element (BOOL is one byte).
size_t DTypeSize(DType dtype);

// The safetensors spelling: "BOOL", "U8", ..., "BF16", "F8_E4M3", "C64".
std::string_view DTypeName(DType dtype);

// Inverse of DTypeName; nullopt for any other string (exact, case-sensitive).
std::optional<DType> ParseDType(std::string_view name);

// A dtype as a user names it (kvtool's --dtype, Python's dtype=): DTypeName's
// spelling in any case ("bf16", "F16") or a NumPy-style name in any case
// ("float16", "bfloat16", "float32", "float64", "int8" ... "uint64").
// nullopt for anything else.
std::optional<DType> ParseDTypeAlias(std::string_view name);

// F16, BF16, F32, F64 (the types Array::AsType converts between).
bool IsFloating(DType dtype);
// BOOL, U8..I64.
bool IsIntegral(DType dtype);

}  // namespace kvstore

#endif  // KVSTORE_DTYPE_H_
