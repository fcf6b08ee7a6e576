// Building a cache from a parsed layer description, and what the header
// alone says about it (docs/format.md §5).
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/format/layout.h"
#include "libkvstore/util/parse_int.h"

namespace kvstore {

namespace {

// A cache saved before its first update (mlx-swift-lm writes no tensors for
// it): the class with the meta state's parameters and no buffers. The
// class's own meta_state setter checks the parameters.
Result<std::unique_ptr<Cache>> EmptyCache(const ParsedLayer& layer) {
  const std::string& c = layer.class_name;
  std::unique_ptr<Cache> cache;
  if (c == "KVCache") {
    cache = std::make_unique<KVCache>();
  } else if (c == "RotatingKVCache") {
    cache = std::make_unique<RotatingKVCache>(0, 0);
  } else if (c == "QuantizedKVCache") {
    cache = std::make_unique<QuantizedKVCache>();
  } else if (c == "ChunkedKVCache") {
    cache = std::make_unique<ChunkedKVCache>(std::nullopt);
  } else {
    return Status::InvalidArgument(c + " has no tensors");
  }
  KV_RETURN_IF_ERROR(cache->SetMetaState(layer.meta));
  if (cache->offset().value_or(0) != 0) {
    return Status::InvalidArgument(c + ": offset " + std::to_string(*cache->offset()) + " but no tensors");
  }
  return cache;
}

}  // namespace

Result<std::unique_ptr<Cache>> BuildLayer(const ParsedLayer& layer, const TensorArrays& arrays) {
  KV_RETURN_IF_ERROR(layer.unsupported);
  if (layer.build_from_children) {
    std::vector<std::shared_ptr<Cache>> children;
    for (const ParsedLayer& c : layer.children) {
      Result<std::unique_ptr<Cache>> child = BuildLayer(c, arrays);
      if (!child.ok()) return child.status().WithPrefix("child " + std::to_string(children.size()));
      children.push_back(std::shared_ptr<Cache>(std::move(child).value()));
    }
    return std::unique_ptr<Cache>(std::make_unique<CacheList>(std::move(children)));
  }
  // from_state accepts more than mlx-lm ever saves; a layer of an mlx-lm
  // file must be a state it can save (docs/format.md §5.8).
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> cache,
                      layer.full_state    ? CacheFromFullState(layer.class_name, layer.state.Resolve(arrays))
                      : layer.empty_state ? EmptyCache(layer)
                                          : CacheFromState(layer.class_name, layer.state.Resolve(arrays), layer.meta));
  if (layer.saved_by_mlx_lm) KV_RETURN_IF_ERROR(cache->CheckSavedState());
  return cache;
}

std::optional<int64_t> OffsetAfterLoad(const ParsedLayer& layer, const SafetensorsHeader& header) {
  const std::string& c = layer.class_name;
  auto meta_int = [&](size_t i) -> std::optional<int64_t> {
    const MetaState& m = layer.meta;
    if (!m.is_list() || i >= m.size() || !m[i].is_string()) return std::nullopt;
    Result<int64_t> v = ParseInt64(m[i].str(), IntSyntax::kPython);
    return v.ok() ? std::optional<int64_t>(*v) : std::nullopt;
  };
  if (c == "RotatingKVCache") return meta_int(2);
  if (c == "QuantizedKVCache") return meta_int(0);
  if (c == "KVCache" || c == "ConcatenateKVCache" || c == "ChunkedKVCache") {
    if (layer.empty_state) return 0;
    if (!layer.state.items.empty() && layer.state.items[0].kind == TensorTree::Kind::kTensor) {
      const Shape& shape = header.tensors[layer.state.items[0].tensor].shape;
      if (shape.size() == 4) return shape[2];
    }
  }
  return std::nullopt;
}

}  // namespace kvstore
