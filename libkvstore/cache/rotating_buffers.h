// Buffer steps shared by RotatingKVCache and BatchRotatingKVCache: mlx-lm's
// _trim, _temporal_order and the growth of the in-place (one token) path.
#ifndef KVSTORE_LIBKVSTORE_CACHE_ROTATING_BUFFERS_H_
#define KVSTORE_LIBKVSTORE_CACHE_ROTATING_BUFFERS_H_

#include <cstdint>
#include <string_view>

#include "libkvstore/cache/kv_buffers.h"

namespace kvstore {

// _trim: v[:keep] ++ v[trim + keep:] when trim > 0, then ++ append (when
// defined), promoting mixed float dtypes.
Array TrimRows(const Array& v, int64_t keep, int64_t trim, const Array& append = Array());

// RotatingKVCache's _temporal_order: the rows of a rotating buffer with
// write pointer `idx` in chronological order.
Array RotatingTemporalOrder(const Array& v, int64_t keep, int64_t idx, int64_t offset);

// Where a one-token update of a rotating buffer goes, computed without
// changing anything: the buffers after growing (by up to kKVStep zero rows
// while they are full and shorter than max_size) and after dropping the
// oldest rows beyond max_size (all but the first `keep`).
struct RotatingSlot {
  Array keys;
  Array values;
  bool replaced = false;  // keys/values differ from the current buffers
  int64_t idx = 0;        // the write pointer before wrapping
  int64_t dropped = 0;    // rows dropped to fit max_size
};

// FailedPrecondition when the buffers are short of max_size yet `offset`
// already exceeds it (mlx-lm raises there too).
Result<RotatingSlot> PlanInPlaceWrite(std::string_view cls, const KVBuffers& buffers,
                                      int64_t offset, int64_t idx, int64_t max_size, int64_t keep,
                                      const Array& keys, const Array& values);

// Fetch views after an update: the first `offset` rows until the window is
// full, then the whole buffers.
KeysValues FetchWindow(const KVBuffers& buffers, int64_t offset, int64_t max_size);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_ROTATING_BUFFERS_H_
