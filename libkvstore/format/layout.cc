// mlx-lm's layouts (v1 and the legacy "{i}_keys" format), layout detection,
// and building a layer from its parsed description (docs/format.md §5).
#include "libkvstore/format/layout.h"

#include <algorithm>
#include <charconv>

#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantize.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/format/digests.h"

namespace kvstore {

TensorTree TensorTree::Tensor(size_t index) { return TensorTree{Kind::kTensor, index, Array(), {}}; }
TensorTree TensorTree::Value(Array value) { return TensorTree{Kind::kValue, 0, std::move(value), {}}; }
TensorTree TensorTree::None() { return TensorTree{Kind::kNone, 0, Array(), {}}; }

CacheState TensorTree::Resolve(const std::vector<Array>& arrays) const {
  switch (kind) {
    case Kind::kNone: return CacheState::None();
    case Kind::kTensor: return CacheState(arrays[tensor]);
    case Kind::kValue: return CacheState(value);
    case Kind::kList: break;
  }
  CacheState::List list;
  for (const TensorTree& t : items) list.push_back(t.Resolve(arrays));
  return CacheState(std::move(list));
}

namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

constexpr std::string_view kSwiftStatePrefix = "__mlx_lm_state_";
constexpr std::string_view kSwiftStateClassPrefix = "__mlx_lm_state_v1__:";
constexpr std::string_view kSwiftStateTensorPrefix = "__mlx_lm_state_tensor_";

// "{i}_keys" / "{i}_values" -> (i, is_keys)
std::optional<std::pair<size_t, bool>> LegacyName(std::string_view name) {
  const size_t u = name.find('_');
  if (u == 0 || u == std::string_view::npos || u > 6) return std::nullopt;
  size_t index = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + u, index);
  if (ec != std::errc() || end != name.data() + u) return std::nullopt;
  const std::string_view suffix = name.substr(u + 1);
  if (suffix != "keys" && suffix != "values") return std::nullopt;
  return std::make_pair(index, suffix == "keys");
}

bool IsLegacyFile(const SafetensorsHeader& h) {
  for (const auto& [k, v] : h.metadata) {
    if (StartsWith(k, "2.")) return false;
  }
  return !h.tensors.empty() && std::all_of(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& t) {
    return LegacyName(t.name).has_value();
  });
}

// The first cache_prompt format: per-layer "{i}_keys"/"{i}_values", plain
// KVCache states; every metadata entry is user metadata.
Status ParseLegacy(const SafetensorsHeader& h, ParsedFile& out) {
  out.layout = PromptCacheLayout::kMlxLmLegacy;
  size_t layers = 0;
  for (const TensorInfo& t : h.tensors) layers = std::max(layers, LegacyName(t.name)->first + 1);
  std::vector<std::pair<int64_t, int64_t>> kv(layers, {-1, -1});
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    auto [layer, is_keys] = *LegacyName(h.tensors[i].name);
    (is_keys ? kv[layer].first : kv[layer].second) = static_cast<int64_t>(i);
  }
  for (size_t i = 0; i < layers; ++i) {
    if (kv[i].first < 0 || kv[i].second < 0) {
      return Status::Corruption("legacy prompt cache: layer " + std::to_string(i) + " lacks keys or values");
    }
    ParsedLayer layer;
    layer.class_name = layer.stored_class = "KVCache";
    layer.state.items = {TensorTree::Tensor(static_cast<size_t>(kv[i].first)),
                         TensorTree::Tensor(static_cast<size_t>(kv[i].second))};
    layer.tensors = {static_cast<size_t>(kv[i].first), static_cast<size_t>(kv[i].second)};
    out.layers.push_back(std::move(layer));
  }
  for (const auto& [k, v] : h.metadata) out.user.emplace_back(k, v);
  return Status::OK();
}

// mlx's tree_unflatten of one layer's tensor names; gaps become empty lists.
Result<TensorTree> TreeFromNames(const NameTree& node) {
  if (node.leaf >= 0) return TensorTree::Tensor(static_cast<size_t>(node.leaf));
  auto list = node.AsList();
  if (!list) return Status::Corruption("tensor names under \"" + node.label + "\" are not list indices");
  TensorTree out;
  for (const NameTree* child : *list) {
    if (child == nullptr) {
      out.items.emplace_back();
      continue;
    }
    KV_ASSIGN_OR_RETURN(TensorTree t, TreeFromNames(*child));
    out.items.push_back(std::move(t));
  }
  return out;
}

void CollectTensors(const TensorTree& t, std::vector<size_t>& out) {
  if (t.kind == TensorTree::Kind::kTensor) out.push_back(t.tensor);
  for (const TensorTree& c : t.items) CollectTensors(c, out);
}

// CacheList children for inspection: meta = [[names], [metas]], state = [child states].
void DescribeChildren(ParsedLayer& layer) {
  const MetaState& m = layer.meta;
  if (layer.class_name != "CacheList" || !m.is_list() || m.size() != 2 || !m[0].is_list() || !m[1].is_list()) {
    return;
  }
  for (size_t c = 0; c < m[0].size(); ++c) {
    ParsedLayer child;
    child.class_name = child.stored_class = m[0][c].is_string() ? m[0][c].str() : "?";
    if (c < m[1].size()) child.meta = child.stored_meta = m[1][c];
    if (c < layer.state.items.size()) child.state = layer.state.items[c];
    CollectTensors(child.state, child.tensors);
    DescribeChildren(child);
    layer.children.push_back(std::move(child));
  }
}

Status ParseMlxLmLayers(const SafetensorsHeader& h, const MetaTrees& meta, ParsedFile& out) {
  const size_t layers = meta.classes.size();
  std::vector<MetaState> metas(layers, MetaState(MetaState::List{}));
  if (const NameTree* node = meta.tree.Child("0")) {
    auto list = node->AsList();
    if (!list) return Status::NotSupported("unknown prompt-cache layout: meta states are not a list (mlx-lm v2?)");
    if (list->size() > layers) {
      return Status::Corruption(std::to_string(list->size()) + " meta states for " + std::to_string(layers) + " layers");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i] == nullptr) continue;
      KV_ASSIGN_OR_RETURN(metas[i], MetaFromTree(*(*list)[i], meta.values));
    }
  }
  NameTree names;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    KV_RETURN_IF_ERROR(names.Insert(h.tensors[i].name, static_cast<int64_t>(i)));
  }
  auto tensor_layers = names.AsList();
  if (!tensor_layers) return Status::Corruption("tensor names do not start with a layer index");
  if (tensor_layers->size() > layers) {
    return Status::Corruption("tensors for " + std::to_string(tensor_layers->size()) + " layers but " +
                              std::to_string(layers) + " class names");
  }
  for (size_t i = 0; i < layers; ++i) {
    ParsedLayer layer;
    layer.class_name = layer.stored_class = meta.classes[i];
    layer.meta = layer.stored_meta = metas[i];
    if (i < tensor_layers->size() && (*tensor_layers)[i] != nullptr) {
      Result<TensorTree> state = TreeFromNames(*(*tensor_layers)[i]);
      if (!state.ok()) return state.status().WithPrefix("layer " + std::to_string(i));
      layer.state = std::move(state).value();
    }
    CollectTensors(layer.state, layer.tensors);
    // Pre-2026-08 ArraysCache files hold a flat slot list (spec §14.8).
    layer.legacy_arrays = (layer.class_name == "ArraysCache" || layer.class_name == "MambaCache") &&
                          !layer.state.items.empty() &&
                          layer.state.items[0].kind == TensorTree::Kind::kTensor;
    DescribeChildren(layer);
    out.layers.push_back(std::move(layer));
  }
  return Status::OK();
}

// Splits the metadata into user metadata and the "0."/"2." trees; notes
// mlx-swift-lm's model-state markers.
Status SplitMetadata(const SafetensorsHeader& h, ParsedFile& out, MetaTrees& meta, bool& swift_state) {
  for (const auto& [k, v] : h.metadata) {
    if (StartsWith(k, "1.")) {
      const std::string user_key = k.substr(2);
      if (StartsWith(user_key, kSwiftStatePrefix)) {
        swift_state = true;
      } else if (!IsKvstoreMetadataKey(user_key)) {
        out.user.emplace_back(user_key, v);
      }
      continue;
    }
    if (!StartsWith(k, "0.") && !StartsWith(k, "2.") && k != "0" && k != "2") {
      return Status::NotSupported("unknown prompt-cache layout: metadata key \"" + k +
                                  "\" is outside mlx-lm's 0./1./2. namespaces");
    }
    KV_RETURN_IF_ERROR(meta.tree.Insert(k, static_cast<int64_t>(meta.values.size())));
    meta.values.push_back(v);
  }
  for (const TensorInfo& t : h.tensors) swift_state = swift_state || StartsWith(t.name, kSwiftStateTensorPrefix);
  const NameTree* classes = meta.tree.Child("2");
  if (classes == nullptr) return Status::OK();
  auto class_list = classes->AsList();
  if (!class_list) {
    return Status::NotSupported("unknown prompt-cache layout: class names are not a list (mlx-lm v2?)");
  }
  for (size_t i = 0; i < class_list->size(); ++i) {
    const NameTree* c = (*class_list)[i];
    if (c == nullptr || c->leaf < 0) {
      return Status::Corruption("class name of layer " + std::to_string(i) + " is missing");
    }
    std::string name = meta.values[static_cast<size_t>(c->leaf)];
    if (StartsWith(name, kSwiftStateClassPrefix)) {
      swift_state = true;
      name = name.substr(kSwiftStateClassPrefix.size());
    }
    meta.classes.push_back(std::move(name));
  }
  return Status::OK();
}

}  // namespace

Result<ParsedFile> ParseLayout(const SafetensorsHeader& h) {
  ParsedFile out;
  for (const auto& [k, v] : h.metadata) {
    if (k == kTensorDigestsMetaKey || k == kHeaderDigestMetaKey) out.has_digests = true;
  }
  if (IsLegacyFile(h)) {
    KV_RETURN_IF_ERROR(ParseLegacy(h, out));
    return out;
  }
  MetaTrees meta;
  bool swift_state = false;
  KV_RETURN_IF_ERROR(SplitMetadata(h, out, meta, swift_state));
  if (meta.tree.Child("2") == nullptr && !swift_state) {
    if (h.tensors.empty() && meta.values.empty()) return out;  // an empty prompt cache
    return Status::NotSupported("unknown prompt-cache layout: no class names (2.*) in the metadata");
  }
  KV_ASSIGN_OR_RETURN(bool swift, IsSwiftLayout(h, meta));
  if (swift || swift_state) {
    out.layout = PromptCacheLayout::kMlxSwiftLm;
    if (swift_state) {
      out.unsupported = Status::NotSupported(
          "the file carries mlx-swift-lm model state (__mlx_lm_state_*), which kvstore cannot load");
    }
    KV_RETURN_IF_ERROR(ParseSwiftLayers(h, meta, out));
    return out;
  }
  KV_RETURN_IF_ERROR(ParseMlxLmLayers(h, meta, out));
  return out;
}

// ---- Building ----

namespace {

Result<int64_t> MetaInt(const MetaState& m, size_t i) {
  int64_t v = 0;
  if (!m.is_list() || i >= m.size() || !m[i].is_string()) return Status::InvalidArgument("meta state too short");
  const std::string& s = m[i].str();
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Status::InvalidArgument("meta state entry \"" + s + "\" is not an integer");
  }
  return v;
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
    if (!IsSupportedQuantization(static_cast<int>(bits), static_cast<int>(group))) {
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

Result<std::unique_ptr<Cache>> BuildLayer(const ParsedLayer& layer, const std::vector<Array>& arrays) {
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

// ---- Writing (mlx-lm) ----

Result<FlatLayer> FlattenLayerMlxLm(const Cache& cache, size_t index) {
  const std::string i = std::to_string(index);
  Result<CacheState> state = cache.State();
  if (!state.ok()) {
    return Status::InvalidArgument("layer " + i + " (" + std::string(cache.class_name()) +
                                   ") cannot be saved: " + std::string(state.status().message()));
  }
  FlatLayer out;
  KV_RETURN_IF_ERROR(FlattenState(*state, i, out.tensors).WithPrefix("layer " + i));
  FlattenMeta(cache.meta_state(), "0." + i, out.metadata);
  // MambaCache is saved under mlx-lm's current name (docs/compat.md).
  const std::string_view cls = cache.class_name() == "MambaCache" ? "ArraysCache" : cache.class_name();
  out.metadata.emplace_back("2." + i, std::string(cls));
  return out;
}

Status CheckUserKey(const std::string& key, PromptCacheLayout layout) {
  if (IsKvstoreMetadataKey(key)) {
    return Status::InvalidArgument("user metadata key \"" + key + "\" is reserved by kvstore");
  }
  if (key.empty()) return Status::InvalidArgument("user metadata keys must not be empty");
  if (layout == PromptCacheLayout::kMlxSwiftLm) {
    if (StartsWith(key, kSwiftStatePrefix)) {
      return Status::InvalidArgument("user metadata key \"" + key + "\" is reserved by mlx-swift-lm");
    }
    return Status::OK();
  }
  if (key.find('.') != std::string::npos) {
    return Status::InvalidArgument("user metadata key \"" + key + "\" must be dot-free (mlx-lm would nest it)");
  }
  if (std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || c == '-'; })) {
    return Status::InvalidArgument("user metadata key \"" + key + "\" must not be an integer");
  }
  return Status::OK();
}

}  // namespace kvstore
