#include "kvstore/cache_diff.h"

#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "kvstore/cache_convert.h"
#include "kvstore/safetensors.h"  // NamedArray
#include "libkvstore/tensor/convert.h"

namespace kvstore {
namespace {

constexpr size_t kChunk = size_t{1} << 16;  // elements converted at a time

struct Accumulator {
  uint64_t values = 0;
  double max_abs = 0;
  double sum_abs = 0;
};

// Adds |a - b| of every element; the arrays have equal shapes.
void Accumulate(const Array& a, const Array& b, Accumulator& acc) {
  const Array ca = a.Contiguous(), cb = b.Contiguous();
  const size_t n = static_cast<size_t>(a.numel());
  std::vector<double> x(std::min(n, kChunk)), y(std::min(n, kChunk));
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t k = std::min(kChunk, n - at);
    ConvertElements(ca.dtype(), ca.data() + at * ca.itemsize(), DType::kF64, reinterpret_cast<std::byte*>(x.data()), k);
    ConvertElements(cb.dtype(), cb.data() + at * cb.itemsize(), DType::kF64, reinterpret_cast<std::byte*>(y.data()), k);
    for (size_t i = 0; i < k; ++i) {
      double d;
      if (std::isnan(x[i]) || std::isnan(y[i])) {
        d = std::isnan(x[i]) && std::isnan(y[i]) ? 0 : std::numeric_limits<double>::infinity();
      } else if (x[i] == y[i]) {
        d = 0;  // also equal infinities
      } else {
        d = std::fabs(x[i] - y[i]);
      }
      acc.max_abs = std::max(acc.max_abs, d);
      acc.sum_abs += d;
    }
  }
  acc.values += n;
}

Result<std::vector<NamedArray>> Flat(const std::shared_ptr<Cache>& c) {
  Result<CacheState> state_or = c->State();
  // An empty cache whose class keeps its tokens in buffers has no state (as
  // in mlx-lm), so nothing to compare; an empty ArraysCache still has one.
  if (!state_or.ok() && c->Empty()) return std::vector<NamedArray>{};
  KV_ASSIGN_OR_RETURN(CacheState state, std::move(state_or));
  // None slots are skipped on both sides alike.
  std::vector<NamedArray> all;
  std::function<void(const CacheState&, const std::string&)> walk = [&](const CacheState& s, const std::string& name) {
    if (s.is_array()) all.push_back({name, s.array()});
    for (size_t i = 0; i < s.size(); ++i) walk(s[i], name + "." + std::to_string(i));
  };
  walk(state, "");
  return all;
}

// Layers that do not line up: nothing was measured, so nothing is identical.
LayerDiff NotComparable(LayerDiff out, std::string mismatch) {
  out.comparable = false;
  out.mismatch = std::move(mismatch);
  out.identical = false;
  out.values = 0;
  out.max_abs_error = 0;
  out.mean_abs_error = 0;
  return out;
}

}  // namespace

Result<LayerDiff> DiffLayers(const std::shared_ptr<Cache>& a, const std::shared_ptr<Cache>& b) {
  LayerDiff out;
  out.class_a = std::string(a->class_name());
  out.class_b = std::string(b->class_name());
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> da, DequantizeLayer(a));
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> db, DequantizeLayer(b));
  out.same_meta = da->class_name() == db->class_name() && da->meta_state() == db->meta_state();
  KV_ASSIGN_OR_RETURN(std::vector<NamedArray> fa, Flat(da));
  KV_ASSIGN_OR_RETURN(std::vector<NamedArray> fb, Flat(db));
  if (fa.size() != fb.size()) {
    return NotComparable(std::move(out), std::to_string(fa.size()) + " vs " + std::to_string(fb.size()) + " tensors");
  }
  out.identical = out.class_a == out.class_b;
  Accumulator acc;
  for (size_t i = 0; i < fa.size(); ++i) {
    const Array& x = fa[i].array;
    const Array& y = fb[i].array;
    if (x.shape() != y.shape()) {
      return NotComparable(std::move(out), "state" + fa[i].name + ": " + x.Describe() + " vs " + y.Describe());
    }
    const bool equal = x.ContentEquals(y);
    if (!equal) out.identical = false;
    if (!IsConvertible(x.dtype()) || !IsConvertible(y.dtype())) {
      if (equal) {
        acc.values += static_cast<uint64_t>(x.numel());
        continue;
      }
      return NotComparable(std::move(out),
                           "state" + fa[i].name + ": " + x.Describe() + " differs and has no numeric comparison");
    }
    Accumulate(x, y, acc);
  }
  out.values = acc.values;
  out.max_abs_error = acc.max_abs;
  out.mean_abs_error = acc.values == 0 ? 0 : acc.sum_abs / static_cast<double>(acc.values);
  return out;
}

}  // namespace kvstore
