// Numeric comparison of two caches layer by layer (what `kvtool diff`
// reports): how far a converted cache (quantized, cast, re-laid-out) is from
// the original.
//
// Thread safety: reentrant; the caches are only read.
#ifndef KVSTORE_CACHE_DIFF_H_
#define KVSTORE_CACHE_DIFF_H_

#include <cstdint>
#include <string>

#include "kvstore/cache.h"

namespace kvstore {

struct LayerDiff {
  std::string class_a, class_b;
  // False when the states do not line up (different tensor counts or
  // shapes, e.g. caches of different token counts); `mismatch` then says
  // where, `identical` is false and the error fields are zero (not measured).
  bool comparable = true;
  std::string mismatch;
  // Same classes and every tensor has the same dtype, shape and bytes;
  // never true when the layers are not comparable.
  bool identical = false;
  bool same_meta = false;   // equal meta states (after dequantizing, if done)
  uint64_t values = 0;      // elements compared
  double max_abs_error = 0;
  double mean_abs_error = 0;
};

// Compares the states of `a` and `b`. A QuantizedKVCache is dequantized
// first, so it compares against the KVCache it came from. Values are compared
// in double precision whatever their dtypes; a NaN on one side only counts as
// an infinite error.
Result<LayerDiff> DiffLayers(const std::shared_ptr<Cache>& a, const std::shared_ptr<Cache>& b);

}  // namespace kvstore

#endif  // KVSTORE_CACHE_DIFF_H_
