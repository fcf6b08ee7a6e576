#include "libkvstore/shared_tier/chunk_piece_shape.h"

#include <algorithm>

namespace kvstore {
namespace {

// Saturating: shapes here come from a spec the caller validated, but a
// product of several int64 dims must still not wrap.
uint64_t Bytes(DType dtype, const Shape& shape) {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) return 0;
    const uint64_t u = static_cast<uint64_t>(d);
    if (u != 0 && n > UINT64_MAX / u) return UINT64_MAX;
    n *= u;
  }
  return n;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

std::string Describe(DType dtype, const Shape& shape) { return std::string(DTypeName(dtype)) + ShapeToString(shape); }

// The [1, H, rows, D] arrays of an attention piece: {keys, values}, or
// quantized {k_wq, k_scales, k_biases, v_wq, v_scales, v_biases}.
std::vector<PieceShape::Tensor> AttentionTensors(const CacheSpec& s, int64_t rows, bool quantized, bool at_most) {
  std::vector<PieceShape::Tensor> out;
  for (int64_t dim : {s.k_head_dim, s.v_head_dim}) {
    if (!quantized) {
      out.push_back({s.dtype, {1, s.kv_heads, rows, dim}, at_most});
      continue;
    }
    out.push_back({DType::kU32, {1, s.kv_heads, rows, dim * s.bits / 32}, at_most});
    out.push_back({s.dtype, {1, s.kv_heads, rows, dim / s.group_size}, at_most});
    out.push_back({s.dtype, {1, s.kv_heads, rows, dim / s.group_size}, at_most});
  }
  return out;
}

}  // namespace

PieceShape ExpectedPiece(const LeafInfo& leaf, ChunkKind kind, int64_t chunk_tokens, int64_t end_tokens) {
  const CacheSpec& s = *leaf.spec;
  PieceShape out;
  if (kind == ChunkKind::kRows) {
    out.classes = {std::string(leaf.cls->rows_piece)};
    out.tensors = AttentionTensors(s, chunk_tokens, leaf.cls->quantized, false);
    return out;
  }
  out.classes = {s.class_name};
  if (leaf.kind == LeafKind::kRotating) {
    // A window holds at most the tokens seen (more than max_size right
    // after a long single update, as in mlx-lm).
    out.tensors = AttentionTensors(s, end_tokens, false, true);
    return out;
  }
  // A class mlx-lm saves under another name (MambaCache as ArraysCache).
  if (leaf.cls->saved_as != s.class_name) out.classes.push_back(std::string(leaf.cls->saved_as));
  for (const SlotSpec& slot : s.slots) {
    Shape shape = {1};
    shape.insert(shape.end(), slot.shape.begin(), slot.shape.end());
    out.tensors.push_back({slot.dtype, std::move(shape), false});
  }
  out.trailing_scalars = 2;
  return out;
}

uint64_t MaxPieceBytes(const PieceShape& piece) {
  uint64_t total = 0;
  for (const PieceShape::Tensor& t : piece.tensors) total = SaturatingAdd(total, Bytes(t.dtype, t.shape));
  return SaturatingAdd(total, piece.trailing_scalars * sizeof(int64_t));
}

std::string PieceShapeProblem(const LayerInfo& layer, const PieceShape& piece) {
  if (std::find(piece.classes.begin(), piece.classes.end(), layer.class_name) == piece.classes.end()) {
    return "piece class " + layer.class_name + ", expected " + piece.classes.front();
  }
  if (!layer.errors.empty()) return layer.errors.front();
  const size_t want = piece.tensors.size();
  if (layer.tensors.size() < want || layer.tensors.size() > want + piece.trailing_scalars) {
    return std::to_string(layer.tensors.size()) + " tensors, expected " + std::to_string(want);
  }
  for (size_t i = 0; i < layer.tensors.size(); ++i) {
    const LayerTensor& got = layer.tensors[i];
    if (i >= want) {
      if (got.shape.size() != 1 || got.shape[0] > 1 || DTypeSize(got.dtype) > sizeof(int64_t)) {
        return "tensor " + got.name + ": " + Describe(got.dtype, got.shape) + ", expected at most one element";
      }
      continue;
    }
    const PieceShape::Tensor& t = piece.tensors[i];
    bool fits = got.dtype == t.dtype && got.shape.size() == t.shape.size();
    for (size_t d = 0; fits && d < t.shape.size(); ++d) {
      fits = t.rows_at_most && d == 2 ? got.shape[d] <= t.shape[d] : got.shape[d] == t.shape[d];
    }
    if (!fits) {
      return "tensor " + got.name + ": " + Describe(got.dtype, got.shape) + ", expected " +
             (t.rows_at_most ? "at most " : "") + Describe(t.dtype, t.shape);
    }
  }
  return "";
}

}  // namespace kvstore
