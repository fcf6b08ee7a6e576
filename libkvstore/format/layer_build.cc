// Building a cache from a parsed layer description, and what the header
// alone says about it (docs/format.md §5).
#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantize.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/format/layout.h"

namespace kvstore {

namespace {

Result<int64_t> MetaInt(const MetaState& m, size_t i) {
  if (!m.is_list() || i >= m.size() || !m[i].is_string()) return Status::InvalidArgument("meta state too short");
  std::optional<int64_t> v = ParseDecimal(m[i].str());
  if (!v) return Status::InvalidArgument("meta state entry \"" + m[i].str() + "\" is not an integer");
  return *v;
}

// A cache saved before its first update (mlx-swift-lm writes no tensors for
// it): the class with the meta state's parameters and no buffers.
Result<std::unique_ptr<Cache>> EmptyCache(const ParsedLayer& layer) {
  const std::string& c = layer.class_name;
  std::unique_ptr<Cache> cache;
  if (c == "KVCache") return std::unique_ptr<Cache>(std::make_unique<KVCache>());
  if (c == "RotatingKVCache") {
    KV_ASSIGN_OR_RETURN(int64_t keep, MetaInt(layer.meta, 0));
    KV_ASSIGN_OR_RETURN(int64_t max_size, MetaInt(layer.meta, 1));
    if (max_size < 1 || keep < 0 || keep > max_size) {
      return Status::InvalidArgument("RotatingKVCache: bad keep/max_size");
    }
    cache = std::make_unique<RotatingKVCache>(max_size, keep);
  } else if (c == "QuantizedKVCache") {
    KV_ASSIGN_OR_RETURN(int64_t group, MetaInt(layer.meta, 1));
    KV_ASSIGN_OR_RETURN(int64_t bits, MetaInt(layer.meta, 2));
    if (bits < 1 || bits > 8 || group < 1 || group > 128 ||
        !IsSupportedQuantization(static_cast<int>(bits), static_cast<int>(group))) {
      return Status::InvalidArgument("QuantizedKVCache: unsupported bits/group_size");
    }
    cache = std::make_unique<QuantizedKVCache>(static_cast<int>(group), static_cast<int>(bits));
  } else if (c == "ChunkedKVCache") {
    KV_ASSIGN_OR_RETURN(int64_t chunk, MetaInt(layer.meta, 0));
    cache = std::make_unique<ChunkedKVCache>(chunk);
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
  if (layer.empty_state) return EmptyCache(layer);
  if (layer.legacy_arrays) {
    std::unique_ptr<ArraysCache> legacy = layer.class_name == "MambaCache" ? std::make_unique<MambaCache>()
                                                                           : std::make_unique<ArraysCache>(0);
    KV_RETURN_IF_ERROR(legacy->SetLegacyState(layer.state.Resolve(arrays)));
    KV_RETURN_IF_ERROR(legacy->SetMetaState(layer.meta));
    return std::unique_ptr<Cache>(std::move(legacy));
  }
  return CacheFromState(layer.class_name, layer.state.Resolve(arrays), layer.meta);
}

std::optional<int64_t> OffsetAfterLoad(const ParsedLayer& layer, const SafetensorsHeader& header) {
  const std::string& c = layer.class_name;
  auto meta_int = [&](size_t i) -> std::optional<int64_t> {
    Result<int64_t> v = MetaInt(layer.meta, i);
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
