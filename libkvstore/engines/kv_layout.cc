#include "libkvstore/engines/kv_layout.h"

#include <cstring>

namespace kvstore::engines {
namespace {

// Element-size specialisations: copying a 2- or 4-byte word is much faster
// than a generic memcpy per element.
// One head's channels from llama.cpp's adjacent pairs to mlx-lm's halves
// (and back): out[i] = in[2i], out[D/2 + i] = in[2i + 1].
template <typename Word>
void Unpair(const std::byte* in, std::byte* out, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  Word a[2];
  for (int64_t i = 0; i < half; ++i) {
    std::memcpy(a, in + 2 * i * sizeof(Word), sizeof(a));
    std::memcpy(out + i * sizeof(Word), &a[0], sizeof(Word));
    std::memcpy(out + (half + i) * sizeof(Word), &a[1], sizeof(Word));
  }
}

template <typename Word>
void Pair(const std::byte* in, std::byte* out, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  Word a[2];
  for (int64_t i = 0; i < half; ++i) {
    std::memcpy(&a[0], in + i * sizeof(Word), sizeof(Word));
    std::memcpy(&a[1], in + (half + i) * sizeof(Word), sizeof(Word));
    std::memcpy(out + 2 * i * sizeof(Word), a, sizeof(a));
  }
}

template <typename Word>
void Gather(const CellBlock& b, std::span<const uint32_t> cells, int64_t n_head, int64_t head_dim,
            bool adjacent_pairs, std::byte* dst) {
  const int64_t n = static_cast<int64_t>(cells.size());
  const bool rows = b.element_stride == sizeof(Word);  // the head's channels are contiguous
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      const std::byte* cell = b.base + cells[t] * b.cell_stride;
      std::byte* out = dst + (h * n + t) * head_dim * sizeof(Word);
      if (rows) {
        const std::byte* head = cell + h * head_dim * sizeof(Word);
        if (adjacent_pairs) {
          Unpair<Word>(head, out, head_dim);
        } else {
          std::memcpy(out, head, head_dim * sizeof(Word));
        }
        continue;
      }
      for (int64_t c = 0; c < head_dim; ++c) {
        const int64_t e = h * head_dim + LlamaChannel(c, head_dim, adjacent_pairs);
        std::memcpy(out + c * sizeof(Word), cell + e * b.element_stride, sizeof(Word));
      }
    }
  }
}

template <typename Word>
void Scatter(const std::byte* src, int64_t n_head, int64_t n, int64_t head_dim, bool adjacent_pairs,
             bool transposed, std::byte* dst) {
  const int64_t width = n_head * head_dim;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      const std::byte* in = src + (h * n + t) * head_dim * sizeof(Word);
      if (!transposed) {
        std::byte* out = dst + (t * width + h * head_dim) * sizeof(Word);
        if (adjacent_pairs) {
          Pair<Word>(in, out, head_dim);
        } else {
          std::memcpy(out, in, head_dim * sizeof(Word));
        }
        continue;
      }
      for (int64_t c = 0; c < head_dim; ++c) {
        const int64_t e = h * head_dim + LlamaChannel(c, head_dim, adjacent_pairs);
        const int64_t at = transposed ? e * n + t : t * width + e;
        std::memcpy(dst + at * sizeof(Word), in + c * sizeof(Word), sizeof(Word));
      }
    }
  }
}

}  // namespace

Result<Array> CastFloat(const Array& a, DType to) {
  if (a.dtype() == to || a.dtype() == DType::kF32 || to == DType::kF32) return a.AsType(to);
  KV_ASSIGN_OR_RETURN(Array f32, a.AsType(DType::kF32));
  return f32.AsType(to);
}

Array GatherHeads(const CellBlock& block, std::span<const uint32_t> cell_of_position, int64_t n_head,
                  int64_t head_dim, bool adjacent_pairs) {
  const int64_t n = static_cast<int64_t>(cell_of_position.size());
  const Shape shape = {1, n_head, n, head_dim};
  auto storage = Storage::AllocateUninitialized(static_cast<size_t>(ShapeNumel(shape)) * DTypeSize(block.dtype));
  std::byte* dst = storage->mutable_data();
  if (DTypeSize(block.dtype) == 4) {
    Gather<uint32_t>(block, cell_of_position, n_head, head_dim, adjacent_pairs, dst);
  } else {
    Gather<uint16_t>(block, cell_of_position, n_head, head_dim, adjacent_pairs, dst);
  }
  return Array::FromStorage(block.dtype, shape, std::move(storage), 0);
}

void ScatterHeads(const Array& heads, bool adjacent_pairs, bool transposed, std::vector<std::byte>& out) {
  const int64_t n_head = heads.dim(1), n = heads.dim(2), head_dim = heads.dim(3);
  const size_t at = out.size();
  out.resize(at + heads.nbytes());
  if (heads.itemsize() == 4) {
    Scatter<uint32_t>(heads.data(), n_head, n, head_dim, adjacent_pairs, transposed, out.data() + at);
  } else {
    Scatter<uint16_t>(heads.data(), n_head, n, head_dim, adjacent_pairs, transposed, out.data() + at);
  }
}

}  // namespace kvstore::engines
