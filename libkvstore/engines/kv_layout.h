// Moving one layer's K or V between llama.cpp's cell rows and mlx-lm's
// [B, H, T, D] tensors, element bytes unchanged (dtype conversion is done
// before or after, on whole tensors).
#ifndef KVSTORE_LIBKVSTORE_ENGINES_KV_LAYOUT_H_
#define KVSTORE_LIBKVSTORE_ENGINES_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/array.h"

namespace kvstore::engines {

// Where the elements of a llama.cpp K or V block lie: element e of cell i is
// at base + i * cell_stride + e * element_stride (bytes). Rows give
// (row_bytes, element size); a transposed V gives (element size, cells *
// element size).
struct CellBlock {
  const std::byte* base = nullptr;
  uint64_t cell_stride = 0;
  uint64_t element_stride = 0;
  DType dtype = DType::kF16;
};

// The llama.cpp channel of mlx-lm channel `c` in a head of `head_dim`
// channels: 2c or 2(c - D/2) + 1 when `adjacent_pairs`, else c.
inline int64_t LlamaChannel(int64_t c, int64_t head_dim, bool adjacent_pairs) {
  if (!adjacent_pairs) return c;
  const int64_t half = head_dim / 2;
  return c < half ? 2 * c : 2 * (c - half) + 1;
}

// `a` converted to the float type `to` (F16, BF16, F32), through F32 between
// the two 16-bit types, where the bulk conversions are fastest. Exact rounding
// either way: F16 and BF16 are both exact in F32.
Result<Array> CastFloat(const Array& a, DType to);

// mlx-lm tensor [1, n_head, T, head_dim] of block.dtype whose position t is
// the cell cell_of_position[t]. REQUIRES: every cell index and element lies
// inside the block; head_dim even when adjacent_pairs.
Array GatherHeads(const CellBlock& block, std::span<const uint32_t> cell_of_position, int64_t n_head,
                  int64_t head_dim, bool adjacent_pairs);

// The llama.cpp bytes of `heads` ([1, n_head, T, head_dim], contiguous):
// rows [T][n_head * head_dim], or columns [n_head * head_dim][T] when
// `transposed`. Cell t holds position t. Appends to `out`.
void ScatterHeads(const Array& heads, bool adjacent_pairs, bool transposed, std::vector<std::byte>& out);

}  // namespace kvstore::engines

#endif  // KVSTORE_LIBKVSTORE_ENGINES_KV_LAYOUT_H_
