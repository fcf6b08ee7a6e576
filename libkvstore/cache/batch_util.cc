#include "libkvstore/cache/batch_util.h"

#include <algorithm>
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

Result<ExtendedBatch> ExtendBatches(std::string_view cls, const BatchSide& a, const BatchSide& b) {
  const Array& ref_k = a.keys.defined() ? a.keys : b.keys;
  const Array& ref_v = a.values.defined() ? a.values : b.values;
  if (a.keys.defined() && b.keys.defined() &&
      (a.keys.dim(1) != b.keys.dim(1) || a.keys.dim(3) != b.keys.dim(3) ||
       a.values.dim(3) != b.values.dim(3))) {
    return Status::InvalidArgument(std::string(cls) + ": extend of caches with different heads or head dims");
  }
  const int64_t max_idx = std::max(a.idx, b.idx);
  const int64_t max_len = std::max(a.keys.defined() ? a.keys.dim(2) : 0, b.keys.defined() ? b.keys.dim(2) : 0);
  struct Justified {
    Array k, v;
    std::vector<int32_t> left;
  };
  auto justify = [&](const BatchSide& side) {
    Array k = side.keys.defined() ? side.keys
                                  : Array::Zeros(DType::kF32, {side.rows, ref_k.dim(1), 0, ref_k.dim(3)});
    Array v = side.values.defined() ? side.values
                                    : Array::Zeros(DType::kF32, {side.rows, ref_v.dim(1), 0, ref_v.dim(3)});
    const int64_t left = max_idx - side.idx;
    int64_t right = max_len - k.dim(2) - left;
    if (right < 0) {
      k = k.Slice(2, 0, std::max<int64_t>(0, k.dim(2) + right));
      v = v.Slice(2, 0, std::max<int64_t>(0, v.dim(2) + right));
      right = 0;
    }
    Justified j{PadRows(k, left, right), PadRows(v, left, right), side.left_padding};
    for (int32_t& p : j.left) p += static_cast<int32_t>(left);
    return j;
  };
  Justified x = justify(a), y = justify(b);
  if (x.k.dim(2) != y.k.dim(2)) {
    return Status::InvalidArgument(std::string(cls) + ": extend of caches whose buffers cannot be aligned");
  }
  KV_ASSIGN_OR_RETURN(x.k, x.k.AsType(PromoteFloat(x.k.dtype(), y.k.dtype())));
  KV_ASSIGN_OR_RETURN(y.k, y.k.AsType(x.k.dtype()));
  KV_ASSIGN_OR_RETURN(x.v, x.v.AsType(PromoteFloat(x.v.dtype(), y.v.dtype())));
  KV_ASSIGN_OR_RETURN(y.v, y.v.AsType(x.v.dtype()));
  const Array ks[] = {x.k, y.k};
  const Array vs[] = {x.v, y.v};
  ExtendedBatch out{Array::Concatenate(ks, 0), Array::Concatenate(vs, 0), x.left, max_idx};
  out.left_padding.insert(out.left_padding.end(), y.left.begin(), y.left.end());
  return out;
}

}  // namespace kvstore
