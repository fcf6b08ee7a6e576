// Helpers shared by the batch caches: per-row integer vectors and the
// per-row roll mlx-lm calls dynamic_roll.
#ifndef KVSTORE_LIBKVSTORE_CACHE_BATCH_UTIL_H_
#define KVSTORE_LIBKVSTORE_CACHE_BATCH_UTIL_H_

#include <string_view>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore {

// Row b of the result is row b of x rolled right by shifts[b] along axis 2.
Array DynamicRoll(const Array& x, const std::vector<int32_t>& shifts);

// A 1-D integer array as int32 values; errors name `cls` and `what`.
Result<std::vector<int32_t>> Int32Values(std::string_view cls, std::string_view what, const Array& a);

// Zero block (B, H, rows, D) of `like`'s dtype.
Array ZeroRows(const Array& like, int64_t rows);

// MLX's type promotion between two float dtypes (F16 + BF16 -> F32).
DType PromoteFloat(DType a, DType b);

// x padded with `left` zero rows before and `right` after along axis 2.
Array PadRows(const Array& x, int64_t left, int64_t right);

// One side of a batch-cache extend: its buffers (undefined when empty),
// batch rows, write position and left padding.
struct BatchSide {
  Array keys;
  Array values;
  int64_t rows = 0;
  int64_t idx = 0;
  std::vector<int32_t> left_padding;
};

struct ExtendedBatch {
  Array keys;
  Array values;
  std::vector<int32_t> left_padding;
  int64_t idx = 0;
};

// mlx-lm's extend: right-justify both sides to the larger write position,
// pad with zero rows (an empty side is an F32 placeholder, so the result
// promotes as upstream), and concatenate along the batch axis.
// REQUIRES: at least one side has buffers.
Result<ExtendedBatch> ExtendBatches(std::string_view cls, const BatchSide& a, const BatchSide& b);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_BATCH_UTIL_H_
