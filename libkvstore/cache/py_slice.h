// Python slice semantics for the caches that index with possibly negative
// or out-of-range positions (mlx-lm relies on them in a few edge cases,
// e.g. RotatingKVCache after an unguarded trim).
#ifndef KVSTORE_LIBKVSTORE_CACHE_PY_SLICE_H_
#define KVSTORE_LIBKVSTORE_CACHE_PY_SLICE_H_

#include <algorithm>
#include <cstdint>
#include <optional>

#include "kvstore/array.h"

namespace kvstore {

// v[start:stop] along `axis` as Python evaluates it (negative indices count
// from the end, everything clamps); nullopt bounds mean "omitted".
inline Array PySlice(const Array& v, int axis, std::optional<int64_t> start,
                     std::optional<int64_t> stop) {
  const int64_t n = v.dim(axis);
  auto norm = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  const int64_t b = start ? norm(*start) : 0;
  const int64_t e = stop ? norm(*stop) : n;
  return v.Slice(axis, b, std::max(b, e));
}

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_PY_SLICE_H_
