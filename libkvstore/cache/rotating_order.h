// RotatingKVCache's _temporal_order, shared with BatchRotatingKVCache::Merge.
#ifndef KVSTORE_LIBKVSTORE_CACHE_ROTATING_ORDER_H_
#define KVSTORE_LIBKVSTORE_CACHE_ROTATING_ORDER_H_

#include "kvstore/array.h"

namespace kvstore {

// The rows of a rotating buffer in chronological order (spec §4.1).
Array RotatingTemporalOrder(const Array& v, int64_t keep, int64_t idx, int64_t offset);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_ROTATING_ORDER_H_
