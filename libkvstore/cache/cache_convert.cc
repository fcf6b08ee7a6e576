#include "kvstore/cache_convert.h"

#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"

namespace kvstore {
namespace {

Result<CacheState> CastState(const CacheState& s, DType dtype) {
  if (s.is_array()) {
    if (!IsFloating(s.array().dtype()) || s.array().dtype() == dtype) return s;
    KV_ASSIGN_OR_RETURN(Array a, s.array().AsType(dtype));
    return CacheState(std::move(a));
  }
  if (!s.is_list()) return s;
  CacheState::List items;
  for (const CacheState& c : s.list()) {
    KV_ASSIGN_OR_RETURN(CacheState x, CastState(c, dtype));
    items.push_back(std::move(x));
  }
  return CacheState(std::move(items));
}

}  // namespace

Result<std::shared_ptr<Cache>> QuantizeLayer(const std::shared_ptr<Cache>& layer, int group_size, int bits,
                                             QuantizeOptions::Rounding rounding) {
  if (layer->class_name() != "KVCache") return layer;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKVCache> q,
                      static_cast<const KVCache&>(*layer).ToQuantized(group_size, bits, rounding));
  return std::shared_ptr<Cache>(std::move(q));
}

Result<std::shared_ptr<Cache>> DequantizeLayer(const std::shared_ptr<Cache>& layer) {
  if (layer->class_name() != "QuantizedKVCache") return layer;
  const auto& q = static_cast<const QuantizedKVCache&>(*layer);
  auto plain = std::make_shared<KVCache>();
  if (q.Empty()) return std::shared_ptr<Cache>(plain);
  KV_ASSIGN_OR_RETURN(CacheState st, q.State());  // [[packed, scales, biases] x 2]
  Array kv[2];
  for (int i = 0; i < 2; ++i) {
    QuantizedArray qa{st[i][0].array(), st[i][1].array(), st[i][2].array()};
    KV_ASSIGN_OR_RETURN(kv[i], Dequantize(qa, q.group_size(), q.bits()));
  }
  KV_RETURN_IF_ERROR(plain->SetState(CacheState({kv[0], kv[1]})));
  return std::shared_ptr<Cache>(plain);
}

bool IsCastLayerDType(DType dtype) { return dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF32; }

Result<std::shared_ptr<Cache>> CastLayer(const std::shared_ptr<Cache>& layer, DType dtype) {
  if (!IsCastLayerDType(dtype)) {
    return Status::InvalidArgument("CastLayer: dtype must be F16, BF16 or F32");
  }
  if (layer->Empty()) return layer;
  KV_ASSIGN_OR_RETURN(CacheState st, layer->State());
  KV_ASSIGN_OR_RETURN(CacheState cast, CastState(st, dtype));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> rebuilt, CacheFromState(layer->class_name(), cast, layer->meta_state()));
  return std::shared_ptr<Cache>(std::move(rebuilt));
}

}  // namespace kvstore
