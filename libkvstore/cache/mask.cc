// Attention masks as mlx-lm builds them (`mlx_lm/models/base.py`
// create_causal_mask / create_attention_mask, `mlx_lm/models/cache.py`
// create_attention_mask). BOOL arrays, true = may attend.
#include "kvstore/mask.h"

#include <string>

#include "kvstore/arrays_cache.h"

namespace kvstore {

Result<Array> CreateCausalMask(int64_t n, const CausalMaskOptions& options) {
  if (n < 0 || options.offset < 0 || (options.window_size && *options.window_size < 0)) {
    return Status::InvalidArgument("create_causal_mask: negative N, offset or window_size");
  }
  const int64_t keys = options.offset + n;
  const bool padded = options.right_padding.has_value() || options.left_padding.has_value();
  if (options.right_padding && options.left_padding &&
      options.right_padding->size() != options.left_padding->size()) {
    return Status::InvalidArgument("create_causal_mask: left and right padding differ in length");
  }
  const int64_t batch = !padded ? 1
                        : options.right_padding ? static_cast<int64_t>(options.right_padding->size())
                                                : static_cast<int64_t>(options.left_padding->size());
  Array mask = padded ? Array::Zeros(DType::kBool, {batch, 1, n, keys})
                      : Array::Zeros(DType::kBool, {n, keys});
  auto* out = reinterpret_cast<uint8_t*>(mask.storage()->mutable_data());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t q = 0; q < n; ++q) {
      const int64_t qpos = options.offset + q;
      for (int64_t k = 0; k < keys; ++k) {
        bool allowed = qpos >= k;
        if (options.window_size) allowed = allowed && qpos < k + *options.window_size;
        if (options.right_padding) allowed = allowed && k < keys - (*options.right_padding)[b];
        if (options.left_padding) allowed = allowed && k >= (*options.left_padding)[b];
        out[(b * n + q) * keys + k] = allowed ? 1 : 0;
      }
    }
  }
  return mask;
}

Result<Mask> CreateAttentionMask(int64_t n, int64_t offset, bool return_array,
                                 std::optional<int64_t> window_size) {
  if (window_size) {
    CausalMaskOptions options;
    options.offset = offset;
    options.window_size = window_size;
    KV_ASSIGN_OR_RETURN(Array a, CreateCausalMask(n, options));
    return Mask::FromArray(std::move(a));
  }
  if (n == 1) return Mask::None();
  if (return_array) {
    CausalMaskOptions options;
    options.offset = offset;
    KV_ASSIGN_OR_RETURN(Array a, CreateCausalMask(n, options));
    return Mask::FromArray(std::move(a));
  }
  return Mask::Causal();
}

Result<Mask> CreateModelAttentionMask(int64_t n, const Cache* cache,
                                      std::optional<int64_t> window_size, bool return_array) {
  if (dynamic_cast<const ArraysCache*>(cache) != nullptr) {
    // Its make_mask(N) takes no return_array/window_size: a TypeError upstream.
    return Status::NotSupported("ArraysCache.make_mask does not take return_array/window_size");
  }
  if (cache != nullptr) {
    MaskOptions options;
    options.window_size = window_size;
    options.return_array = return_array;
    Result<Mask> m = cache->MakeMask(n, options);
    // Caches without make_mask (NotSupported) use the offset-0 fallback, as
    // hasattr() does upstream; other errors propagate.
    if (m.ok() || m.status().code() != StatusCode::kNotSupported ||
        std::string(m.status().message()).find("has no make_mask") == std::string::npos) {
      return m;
    }
  }
  if (n == 1) return Mask::None();
  if (return_array || (window_size && n > *window_size)) {
    CausalMaskOptions options;
    options.window_size = window_size;
    KV_ASSIGN_OR_RETURN(Array a, CreateCausalMask(n, options));
    return Mask::FromArray(std::move(a));
  }
  return Mask::Causal();
}

}  // namespace kvstore
