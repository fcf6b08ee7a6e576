// Element-wise dtype conversion used by Array::AsType.
#ifndef KVSTORE_LIBKVSTORE_TENSOR_CONVERT_H_
#define KVSTORE_LIBKVSTORE_TENSOR_CONVERT_H_

#include <cstddef>

#include "kvstore/dtype.h"

namespace kvstore {

// True for the dtypes AsType handles: BOOL, the integers, F16, BF16, F32, F64.
bool IsConvertible(DType dtype);

// Converts n dense elements. Float -> float rounds to nearest even (F64 -> F16
// or BF16 rounds once, not via F32). Float -> integer truncates toward zero,
// saturating at the integer's range, NaN -> 0 (C++ leaves those undefined).
// Anything -> BOOL is (value != 0).
// REQUIRES: both dtypes IsConvertible, src aligned to its element size.
void ConvertElements(DType from, const std::byte* src, DType to, std::byte* dst, size_t n);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TENSOR_CONVERT_H_
