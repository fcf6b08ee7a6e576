// The buffers of a QuantizedKVCache: six copy-on-write arrays (packed,
// scales, biases for keys and for values). Shared with KVCache::ToQuantized.
#ifndef KVSTORE_LIBKVSTORE_CACHE_QUANTIZED_BUFFERS_H_
#define KVSTORE_LIBKVSTORE_CACHE_QUANTIZED_BUFFERS_H_

#include <array>
#include <memory>

#include "kvstore/quantized_kv_cache.h"
#include "libkvstore/cache/cow_buffer.h"

namespace kvstore {

struct QuantizedKVCache::Buffers {
  std::array<CowBuffer, 3> keys;    // packed, scales, biases
  std::array<CowBuffer, 3> values;
};

std::shared_ptr<QuantizedKVCache::Buffers> MakeQuantizedBuffers(QuantizedArray keys,
                                                                QuantizedArray values);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_QUANTIZED_BUFFERS_H_
