// What each layer of a shared-tier value must look like, as its file header
// describes it: class, tensor count, dtypes and shapes, for a piece of a
// given leaf. DecodeChunk checks these before a tensor byte is
// decompressed or hashed, so a value declaring tensors larger than a chunk
// costs no more than reading its header. Pure functions (thread-safe).
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_PIECE_SHAPE_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_PIECE_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "libkvstore/shared_tier/chunk_layout.h"

namespace kvstore {

struct PieceShape {
  struct Tensor {
    DType dtype = DType::kF16;
    Shape shape;                // exact, or with rows_at_most the largest
    bool rows_at_most = false;  // axis 2 (tokens) may be shorter than shape[2]
  };
  std::vector<std::string> classes;  // the class names it may be stored as
  std::vector<Tensor> tensors;       // in the file layer's tensor order
  // Trailing rank-1 tensors of at most one element each (an ArraysCache's
  // left_padding and lengths, batch 1) allowed after `tensors`.
  size_t trailing_scalars = 0;
};

// The piece of `leaf` in a value of `kind` whose boundary is `end_tokens`:
// a rows piece holds `chunk_tokens` rows; a snapshot piece holds the
// leaf's whole state at `end_tokens` (a rotating window at most that many
// rows). REQUIRES: the leaf may appear in a value of `kind`.
PieceShape ExpectedPiece(const LeafInfo& leaf, ChunkKind kind, int64_t chunk_tokens, int64_t end_tokens);

// The most data bytes such a piece can declare.
uint64_t MaxPieceBytes(const PieceShape& piece);

// What about `layer` disagrees with `piece` ("tensor 0: F16[1,2,4194304,32],
// expected F16[1,2,4,32]"); empty when nothing does. Reads no tensor byte.
std::string PieceShapeProblem(const LayerInfo& layer, const PieceShape& piece);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_PIECE_SHAPE_H_
