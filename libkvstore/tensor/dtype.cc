#include "kvstore/dtype.h"

#include <array>

namespace kvstore {
namespace {

struct DTypeInfo {
  std::string_view name;
  size_t size;
};

// Indexed by DType; the order must match the enum.
constexpr std::array<DTypeInfo, kNumDTypes> kDTypeTable = {{
    {"BOOL", 1},
    {"U8", 1},
    {"I8", 1},
    {"U16", 2},
    {"I16", 2},
    {"U32", 4},
    {"I32", 4},
    {"U64", 8},
    {"I64", 8},
    {"F16", 2},
    {"BF16", 2},
    {"F32", 4},
    {"F64", 8},
    {"F8_E4M3", 1},
    {"F8_E5M2", 1},
    {"F8_E8M0", 1},
    {"C64", 8},
}};

const DTypeInfo& Info(DType dtype) { return kDTypeTable[static_cast<size_t>(dtype)]; }

}  // namespace

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

std::optional<DType> ParseDType(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kDTypeTable[static_cast<size_t>(i)].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF32 ||
         dtype == DType::kF64;
}

bool IsIntegral(DType dtype) { return static_cast<int>(dtype) <= static_cast<int>(DType::kI64); }

}  // namespace kvstore
