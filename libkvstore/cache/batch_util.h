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

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_BATCH_UTIL_H_
