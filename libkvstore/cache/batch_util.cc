#include "libkvstore/cache/batch_util.h"

#include <string>

namespace kvstore {

Array DynamicRoll(const Array& x, const std::vector<int32_t>& shifts) {
  Array out = Array::Zeros(x.dtype(), x.shape());
  for (int64_t b = 0; b < x.dim(0); ++b) {
    Status s = out.Slice(0, b, b + 1).CopyFrom(x.Slice(0, b, b + 1).Roll(2, shifts[b]));
    (void)s;  // same shapes and dtype by construction
  }
  return out;
}

Result<std::vector<int32_t>> Int32Values(std::string_view cls, std::string_view what, const Array& a) {
  if (a.ndim() != 1 || !IsIntegral(a.dtype()) || a.dtype() == DType::kBool) {
    return Status::InvalidArgument(std::string(cls) + ": " + std::string(what) + " " + a.Describe() +
                                   " must be a 1-D integer array");
  }
  KV_ASSIGN_OR_RETURN(Array i64, a.AsType(DType::kI64));
  std::vector<int32_t> out;
  for (int64_t v : i64.ToVector<int64_t>()) {
    if (v < INT32_MIN || v > INT32_MAX) {
      return Status::InvalidArgument(std::string(cls) + ": " + std::string(what) + " value out of int32 range");
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

Array ZeroRows(const Array& like, int64_t rows) {
  return Array::Zeros(like.dtype(), {like.dim(0), like.dim(1), rows, like.dim(3)});
}

DType PromoteFloat(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kF64 || b == DType::kF64) return DType::kF64;
  return DType::kF32;
}

Array PadRows(const Array& x, int64_t left, int64_t right) {
  if (left == 0 && right == 0) return x;
  const Array parts[] = {ZeroRows(x, left), x, ZeroRows(x, right)};
  return Array::Concatenate(parts, 2);
}

}  // namespace kvstore
