// Per-layer conversions of a cache (what `kvtool convert --quantize /
// --dequantize / --dtype` apply to each layer). Each returns a new cache and
// leaves its argument unchanged; a layer the conversion does not apply to is
// returned as is (the same shared object).
//
// Thread safety: reentrant; the argument is only read.
#ifndef KVSTORE_CACHE_CONVERT_H_
#define KVSTORE_CACHE_CONVERT_H_

#include <memory>

#include "kvstore/cache.h"
#include "kvstore/quantize.h"

namespace kvstore {

// KVCache -> QuantizedKVCache as mlx-lm's KVCache.to_quantized (bit-exact
// with MLX's CPU kernel, or the GPU rounding rule). Other classes unchanged.
// InvalidArgument for unsupported bits/group_size or a head dim that is not
// a multiple of the group size.
Result<std::shared_ptr<Cache>> QuantizeLayer(const std::shared_ptr<Cache>& layer, int group_size, int bits,
                                             QuantizeOptions::Rounding rounding = QuantizeOptions::Rounding::kCpu);

// QuantizedKVCache -> KVCache holding the dequantized keys and values (in the
// scales' dtype), offset preserved. Other classes unchanged.
Result<std::shared_ptr<Cache>> DequantizeLayer(const std::shared_ptr<Cache>& layer);

// Every floating-point tensor of the layer's state converted to `dtype`
// (F16, BF16 or F32: IsCastLayerDType); integer tensors (packed codes,
// offsets) unchanged. InvalidArgument for another dtype.
Result<std::shared_ptr<Cache>> CastLayer(const std::shared_ptr<Cache>& layer, DType dtype);
// True for the dtypes CastLayer converts to.
bool IsCastLayerDType(DType dtype);

}  // namespace kvstore

#endif  // KVSTORE_CACHE_CONVERT_H_
