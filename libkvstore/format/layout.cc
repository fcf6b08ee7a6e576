// mlx-lm's layouts (v1 and the legacy "{i}_keys" format) read and written,
// and layout detection (docs/format.md §5).
#include "libkvstore/format/layout.h"

#include <algorithm>

#include "libkvstore/format/digests.h"
#include "libkvstore/util/parse_int.h"

namespace kvstore {

TensorTree TensorTree::Tensor(size_t index) { return TensorTree{Kind::kTensor, index, Array(), {}}; }
TensorTree TensorTree::Value(CacheState value) { return TensorTree{Kind::kValue, 0, std::move(value), {}}; }
TensorTree TensorTree::None() { return TensorTree{Kind::kNone, 0, CacheState(), {}}; }

CacheState TensorTree::Resolve(const TensorArrays& arrays) const {
  switch (kind) {
    case Kind::kNone: return CacheState::None();
    case Kind::kTensor: return CacheState(arrays.at(tensor));
    case Kind::kValue: return value;
    case Kind::kList: break;
  }
  CacheState::List list;
  for (const TensorTree& t : items) list.push_back(t.Resolve(arrays));
  return CacheState(std::move(list));
}

namespace {

// "{i}_keys" / "{i}_values" -> (i, is_keys)
std::optional<std::pair<size_t, bool>> LegacyName(std::string_view name) {
  const size_t u = name.find('_');
  if (u == 0 || u == std::string_view::npos || u > 6 || name[0] == '-') return std::nullopt;
  Result<int64_t> index = ParseInt64(name.substr(0, u));
  if (!index.ok()) return std::nullopt;
  if (u > 1 && name[0] == '0') return std::nullopt;  // "01_keys" would alias "1_keys"
  const std::string_view suffix = name.substr(u + 1);
  if (suffix != "keys" && suffix != "values") return std::nullopt;
  return std::make_pair(static_cast<size_t>(*index), suffix == "keys");
}

bool IsLegacyFile(const SafetensorsHeader& h) {
  for (const auto& [k, v] : h.metadata) {
    if (k.starts_with("2.")) return false;
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

}  // namespace

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

namespace {

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
  // The first layer with an ArraysCache in each mlx-lm layout.
  std::optional<size_t> release_layer, current_layer;
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
    const ArraysCacheForms forms = NormalizeArraysCaches(layer);
    if (forms.release && !release_layer) release_layer = i;
    if (forms.current && !current_layer) current_layer = i;
    DescribeChildren(layer);
    out.layers.push_back(std::move(layer));
  }
  if (release_layer && current_layer) {
    return Status::Corruption("layers disagree on the ArraysCache layout: layer " + std::to_string(*release_layer) +
                              " is laid out as mlx-lm 0.31 writes it, layer " + std::to_string(*current_layer) +
                              " as the current mlx-lm does");
  }
  if (release_layer) out.layout = PromptCacheLayout::kMlxLm031;
  return Status::OK();
}

// The "2." class names (list indices 0..n-1); strips and notes mlx-swift-lm's
// model-state marker.
Status ReadClassNames(MetaTrees& meta, bool& swift_state) {
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
    if (name.starts_with(kSwiftStateClassPrefix)) {
      swift_state = true;
      name = name.substr(kSwiftStateClassPrefix.size());
    }
    meta.classes.push_back(std::move(name));
  }
  return Status::OK();
}

// Splits the metadata into user metadata and the "0."/"2." trees; notes
// mlx-swift-lm's model-state markers.
Status SplitMetadata(const SafetensorsHeader& h, ParsedFile& out, MetaTrees& meta, bool& swift_state) {
  Metadata state_keys;  // "1.__mlx_lm_state_*": Swift's model state, or ordinary user keys
  for (const auto& [k, v] : h.metadata) {
    if (k.starts_with("1.")) {
      const std::string user_key = k.substr(2);
      if (user_key.starts_with(kSwiftStatePrefix)) {
        state_keys.emplace_back(user_key, v);
      } else if (!IsKvstoreMetadataKey(user_key)) {
        out.user.emplace_back(user_key, v);
      }
      continue;
    }
    if (!k.starts_with("0.") && !k.starts_with("2.") && k != "0" && k != "2") {
      return Status::NotSupported("unknown prompt-cache layout: metadata key \"" + k +
                                  "\" is outside mlx-lm's 0./1./2. namespaces");
    }
    KV_RETURN_IF_ERROR(meta.tree.Insert(k, static_cast<int64_t>(meta.values.size())));
    meta.values.push_back(v);
  }
  for (const TensorInfo& t : h.tensors) swift_state = swift_state || t.name.starts_with(kSwiftStateTensorPrefix);
  KV_RETURN_IF_ERROR(ReadClassNames(meta, swift_state));
  // Model state needs its tensors or its class-name marker; the keys alone
  // are user metadata (mlx-lm writes whatever keys its caller gives it).
  if (!swift_state) out.user.insert(out.user.end(), state_keys.begin(), state_keys.end());
  return Status::OK();
}

}  // namespace

bool IsMlxLm032Metadata(const Metadata& metadata) {
  for (const auto& [k, v] : metadata) {
    if (k == "2.0") return v.empty();
  }
  return false;
}

std::string_view UserPrefix(PromptCacheLayout layout) {
  return layout == PromptCacheLayout::kMlxLm032 ? "0." : "1.";
}

Result<ParsedFile> ParseLayout(const SafetensorsHeader& h, const TensorFetch& fetch) {
  ParsedFile out;
  for (const auto& [k, v] : h.metadata) {
    if (IsDigestMetaKey(k)) out.has_digests = true;
  }
  if (IsMlxLm032Metadata(h.metadata)) {
    KV_RETURN_IF_ERROR(ParseMlxLm032(h, fetch, out));
    return out;
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

Status CheckUserKey(const std::string& key, PromptCacheLayout layout) {
  if (IsKvstoreMetadataKey(key)) {
    return Status::InvalidArgument("user metadata key \"" + key + "\" is reserved by kvstore");
  }
  if (key.empty()) return Status::InvalidArgument("user metadata keys must not be empty");
  if (key.starts_with(kSwiftStatePrefix)) {
    return Status::InvalidArgument("user metadata key \"" + key + "\" is reserved by mlx-swift-lm");
  }
  if (layout == PromptCacheLayout::kMlxSwiftLm) {
    // Swift splits names at '.' and drops empty parts: "a..b" would come back as "a.b".
    if (key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos) {
      return Status::InvalidArgument("user metadata key \"" + key + "\" has an empty part between dots");
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
