#include "kvstore/dtype.h"

#include <array>
#include <cctype>
#include <string>
#include <utility>

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

std::optional<DType> ParseDTypeAlias(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static constexpr std::pair<std::string_view, DType> kAliases[] = {
      {"BFLOAT16", DType::kBF16}, {"FLOAT16", DType::kF16}, {"FLOAT32", DType::kF32},
      {"FLOAT64", DType::kF64},   {"INT8", DType::kI8},     {"UINT8", DType::kU8},
      {"INT16", DType::kI16},     {"UINT16", DType::kU16},  {"INT32", DType::kI32},
      {"UINT32", DType::kU32},    {"INT64", DType::kI64},   {"UINT64", DType::kU64}};
  for (const auto& [alias, dtype] : kAliases) {
    if (upper == alias) return dtype;
  }
  return ParseDType(upper);
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF32 ||
         dtype == DType::kF64;
}

bool IsIntegral(DType dtype) { return static_cast<int>(dtype) <= static_cast<int>(DType::kI64); }

}  // namespace kvstore
