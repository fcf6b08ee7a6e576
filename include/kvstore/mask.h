// Attention masks: mlx-lm's create_causal_mask and the two
// create_attention_mask flavours. BOOL arrays, true = may attend.
#ifndef KVSTORE_MASK_H_
#define KVSTORE_MASK_H_

#include <cstdint>
#include <optional>
#include <span>

#include "kvstore/array.h"
#include "kvstore/cache.h"

namespace kvstore {

struct CausalMaskOptions {
  int64_t offset = 0;
  std::optional<int64_t> window_size;
  std::optional<std::span<const int32_t>> right_padding;  // per batch row
  std::optional<std::span<const int32_t>> left_padding;   // per batch row
};

// mask[q, k] = (offset + q >= k) [and offset + q < k + window]
//   [and k < offset + n - right_padding[b]] [and k >= left_padding[b]].
// Shape (n, offset + n), or (B, 1, n, offset + n) when a padding is given.
// InvalidArgument for negative n/offset/window or paddings of different lengths.
Result<Array> CreateCausalMask(int64_t n, const CausalMaskOptions& options = {});

// cache.py's create_attention_mask(N, offset, return_array, window_size):
// window -> array; n == 1 -> None; return_array -> array; else "causal".
Result<Mask> CreateAttentionMask(int64_t n, int64_t offset, bool return_array,
                                 std::optional<int64_t> window_size);

// base.py's create_attention_mask(h, cache, window_size, return_array) for a
// hidden state with n positions: the cache's MakeMask when it has one, else
// the offset-0 fallback. NotSupported propagates from caches whose make_mask
// does not take these arguments (ArraysCache in mlx-lm).
Result<Mask> CreateModelAttentionMask(int64_t n, const Cache* cache,
                                      std::optional<int64_t> window_size, bool return_array);

}  // namespace kvstore

#endif  // KVSTORE_MASK_H_
