// ggml element-type ids as they appear in llama.cpp state files, and the
// three that kvstore converts.
#include <array>
#include <cstring>
#include <string>

#include "kvstore/llama_state.h"

namespace kvstore {
namespace {

// ggml's `enum ggml_type` (ids 4, 5 and 31-33, 36-38 were removed upstream).
constexpr std::array<std::string_view, 40> kGgmlTypeNames = {
    "f32",     "f16",    "q4_0",    "q4_1",    "",        "",       "q5_0",   "q5_1",   "q8_0",    "q8_1",
    "q2_k",    "q3_k",   "q4_k",    "q5_k",    "q6_k",    "q8_k",   "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
    "iq4_nl",  "iq3_s",  "iq2_s",   "iq4_xs",  "i8",      "i16",    "i32",    "i64",    "f64",     "iq1_m",
    "bf16",    "",       "",        "",        "tq1_0",   "tq2_0",  "",       "",       "",        "mxfp4",
};

}  // namespace

std::string GgmlTypeName(int32_t type) {
  if (type >= 0 && static_cast<size_t>(type) < kGgmlTypeNames.size() && !kGgmlTypeNames[type].empty()) {
    return std::string(kGgmlTypeNames[type]);
  }
  return "type " + std::to_string(type);
}

DType GgmlTypeToDType(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
  }
  return DType::kF16;
}

std::optional<GgmlType> DTypeToGgmlType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return GgmlType::kF32;
    case DType::kF16: return GgmlType::kF16;
    case DType::kBF16: return GgmlType::kBF16;
    default: return std::nullopt;
  }
}

std::optional<GgmlType> ParseGgmlType(std::string_view name) {
  if (name == "f32") return GgmlType::kF32;
  if (name == "f16") return GgmlType::kF16;
  if (name == "bf16") return GgmlType::kBF16;
  return std::nullopt;
}

bool LooksLikeLlamaState(std::span<const std::byte> bytes) {
  if (bytes.size() < 4) return false;
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), 4);
  return magic == kLlamaStateMagic;
}

uint64_t LlamaState::KBytes(const LlamaStateStream& stream, const LlamaStateLayer& layer) {
  return uint64_t{stream.cell_count()} * layer.n_embd_k * DTypeSize(GgmlTypeToDType(layer.k_type));
}

uint64_t LlamaState::VBytes(const LlamaStateStream& stream, const LlamaStateLayer& layer) {
  return uint64_t{stream.cell_count()} * layer.n_embd_v * DTypeSize(GgmlTypeToDType(layer.v_type));
}

uint64_t LlamaState::FileBytes() const {
  uint64_t n = 12 + 4 * uint64_t{tokens.size()} + 4;
  for (const LlamaStateStream& s : streams) {
    n += 4;
    if (s.cell_count() == 0) continue;
    n += 12 * uint64_t{s.cell_count()} + 8;
    for (const LlamaStateLayer& l : s.layers) n += 12 + KBytes(s, l) + 12 + VBytes(s, l);
  }
  return n;
}

}  // namespace kvstore
