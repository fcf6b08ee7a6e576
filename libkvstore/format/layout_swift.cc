// mlx-swift-lm's prompt-cache layout (docs/format.md §5.6; mlx-swift-lm
// `Libraries/MLXLMCommon/KVCache.swift`, savePromptCache):
// detection and reading into mlx-lm's shapes (writing: layout_swift_write.cc).
//
// Swift flattens every layer to exactly "i.j" tensors (j = position in a
// flat array list) and "0.i.j" meta strings, with per-class meta arities
// that differ from mlx-lm's (KVCache [""], RotatingKVCache with a step,
// QuantizedKVCache with a step and flat arrays, ArraysCache and CacheList
// describing their structure in the meta strings).
#include <algorithm>

#include "kvstore/arrays_cache.h"
#include "libkvstore/format/layout.h"
#include "libkvstore/util/parse_int.h"

namespace kvstore {
namespace {

constexpr size_t kMaxCsvValues = size_t{1} << 20;

Status Bad(size_t layer, const std::string& what) {
  return Status::Corruption("mlx-swift-lm layer " + std::to_string(layer) + ": " + what);
}

// "3,0,12" -> {3, 0, 12}; "" -> {}.
std::optional<std::vector<int64_t>> ParseCsv(std::string_view s) {
  std::vector<int64_t> out;
  if (s.empty()) return out;
  while (true) {
    const size_t comma = s.find(',');
    Result<int64_t> v = ParseInt64(s.substr(0, comma));
    if (!v.ok() || out.size() >= kMaxCsvValues) return std::nullopt;
    out.push_back(*v);
    if (comma == std::string_view::npos) return out;
    s.remove_prefix(comma + 1);
  }
}

bool IsKvClass(std::string_view c) {
  return c == "KVCache" || c == "KVCacheSimple" || c == "RotatingKVCache" || c == "QuantizedKVCache" ||
         c == "ChunkedKVCache";
}

// Which layout one layer's meta node suggests.
enum class Hint { kNeutral, kMlxLm, kSwift };

struct LayerEvidence {
  bool nested_tensor_names = false;  // a name of three or more parts
  size_t tensors = 0;
};

Hint LayerHint(std::string_view cls, const NameTree* meta, const LayerEvidence& e,
               const std::vector<std::string>& values) {
  if (cls == "TurboQuantKVCache" || cls == "KVCacheSimple") return Hint::kSwift;
  if (e.nested_tensor_names) return Hint::kMlxLm;  // Swift names are always "i.j"
  if (cls == "ChunkedKVCache") {
    // Laid out alike, except what mlx-lm cannot save: a cache before its
    // first update (no tensors) and Swift's default chunk size None.
    const NameTree* chunk = meta == nullptr ? nullptr : meta->Child("0");
    const bool none = chunk != nullptr && chunk->leaf >= 0 && values[static_cast<size_t>(chunk->leaf)] == "None";
    return e.tensors == 0 || none ? Hint::kSwift : Hint::kNeutral;
  }
  if (meta == nullptr) return Hint::kNeutral;
  if (meta->leaf >= 0) return Hint::kMlxLm;  // "0.i" = "" (Swift writes "0.i.0")
  for (const NameTree& c : meta->children) {
    if (!c.children.empty()) return Hint::kMlxLm;  // nested meta (mlx-lm CacheList)
  }
  const size_t arity = meta->children.size();
  if (cls == "KVCache") return arity == 1 ? Hint::kSwift : Hint::kNeutral;
  if (cls == "RotatingKVCache") return arity == 4 ? Hint::kMlxLm : (arity == 5 || arity == 6) ? Hint::kSwift : Hint::kNeutral;
  if (cls == "QuantizedKVCache") return arity == 3 ? Hint::kMlxLm : arity == 4 ? Hint::kSwift : Hint::kNeutral;
  if (cls == "ArraysCache" || cls == "MambaCache" || cls == "CacheList") return Hint::kSwift;
  return Hint::kNeutral;  // ChunkedKVCache: the same in both
}

// Swift's meta strings of one layer: "0.i.j" leaves, gaps filled with "".
Result<std::vector<std::string>> SwiftMeta(const NameTree& node, const std::vector<std::string>& values,
                                           size_t layer) {
  if (node.leaf >= 0) return Bad(layer, "meta state is a single value, expected a list");
  auto list = node.AsList();
  if (!list) return Bad(layer, "meta state keys are not list indices");
  std::vector<std::string> out;
  for (const NameTree* c : *list) {
    // mlx-swift-lm writes every index; a gap is not its file.
    if (c == nullptr) return Bad(layer, "meta state index " + std::to_string(out.size()) + " is missing");
    if (c->leaf < 0) return Bad(layer, "meta state is nested");
    out.push_back(values[static_cast<size_t>(c->leaf)]);
  }
  return out;
}

struct SwiftInput {
  const SafetensorsHeader* header;
  size_t layer;  // top-level index, for messages
};

Status CheckRank4(const SwiftInput& in, const std::vector<size_t>& tensors, const std::string& cls) {
  for (size_t t : tensors) {
    if (in.header->tensors[t].shape.size() != 4) {
      return Bad(in.layer, cls + " tensor \"" + in.header->tensors[t].name + "\" is not rank 4");
    }
  }
  return Status::OK();
}

Result<std::vector<int64_t>> Ints(const SwiftInput& in, const std::vector<std::string>& meta, size_t n,
                                  const std::string& cls) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    Result<int64_t> v = ParseInt64(meta[i]);
    if (!v.ok()) return Bad(in.layer, cls + " meta state entry " + std::string(v.status().message()));
    out.push_back(*v);
  }
  return out;
}

MetaState IntMeta(const std::vector<std::string>& meta, std::initializer_list<size_t> pick) {
  MetaState::List out;
  for (size_t i : pick) out.emplace_back(meta[i]);
  return MetaState(std::move(out));
}

Result<Array> CsvArray(const SwiftInput& in, const std::string& csv, const char* what) {
  std::optional<std::vector<int64_t>> v = ParseCsv(csv);
  if (!v) return Bad(in.layer, std::string(what) + " \"" + csv.substr(0, 40) + "\" is not a list of integers");
  std::vector<int32_t> narrow;
  for (int64_t x : *v) {
    if (x < INT32_MIN || x > INT32_MAX) return Bad(in.layer, std::string(what) + " value out of range");
    narrow.push_back(static_cast<int32_t>(x));
  }
  return Array::FromInt32s(narrow);
}

Result<ParsedLayer> ParseSwiftLayer(const SwiftInput& in, const std::string& cls, const std::vector<std::string>& meta,
                                    const std::vector<size_t>& tensors, int depth);

Status ParseArraysCache(const SwiftInput& in, const std::vector<std::string>& meta, ParsedLayer& layer) {
  layer.meta = MetaState("");
  const Result<int64_t> slot_count = meta.size() >= 2 ? ParseInt64(meta[0]) : ParseInt64("");
  if (!slot_count.ok()) {  // Swift's legacy form: meta [""], the slots compacted
    TensorTree slots;
    for (size_t t : layer.tensors) slots.items.push_back(TensorTree::Tensor(t));
    layer.state = ArraysStateFromSlots(std::move(slots));
    return Status::OK();
  }
  if (*slot_count < 0 || static_cast<size_t>(*slot_count) > ArraysCache::kMaxSlots) {
    return Bad(in.layer, "ArraysCache slot count " + meta[0] + " out of range");
  }
  std::optional<std::vector<int64_t>> present = ParseCsv(meta[1]);
  if (!present || present->size() != layer.tensors.size()) {
    return Bad(in.layer, "ArraysCache present slots \"" + meta[1].substr(0, 40) + "\" do not match its " +
                             std::to_string(layer.tensors.size()) + " tensors");
  }
  TensorTree slots;
  slots.items.assign(static_cast<size_t>(*slot_count), TensorTree::None());
  for (size_t k = 0; k < present->size(); ++k) {
    const int64_t s = (*present)[k];
    if (s < 0 || s >= *slot_count || slots.items[static_cast<size_t>(s)].kind != TensorTree::Kind::kNone) {
      return Bad(in.layer, "ArraysCache present slot " + std::to_string(s) + " is out of range or repeated");
    }
    slots.items[static_cast<size_t>(s)] = TensorTree::Tensor(layer.tensors[k]);
  }
  if (meta.size() > 4) return Bad(in.layer, "ArraysCache meta state has " + std::to_string(meta.size()) + " entries");
  layer.state.items.push_back(std::move(slots));
  for (size_t i : {size_t{2}, size_t{3}}) {
    if (i < meta.size() && !meta[i].empty()) {
      KV_ASSIGN_OR_RETURN(Array a, CsvArray(in, meta[i], i == 2 ? "left padding" : "lengths"));
      layer.state.items.push_back(TensorTree::Value(std::move(a)));
    } else {
      layer.state.items.push_back(TensorTree::Value(Array::Zeros(DType::kF32, {0})));  // mlx-lm's None
    }
  }
  return Status::OK();
}

Status ParseCacheList(const SwiftInput& in, const std::vector<std::string>& meta, ParsedLayer& layer, int depth) {
  if (depth >= kMaxSwiftCacheListDepth) return Bad(in.layer, "CacheList nesting too deep");
  const Result<int64_t> count = ParseInt64(meta.empty() ? "" : meta[0]);
  if (!count.ok() || *count < 0 || static_cast<size_t>(*count) > meta.size()) {
    return Bad(in.layer, "CacheList child count is missing or out of range");
  }
  size_t m = 1, t = 0;
  MetaState::List names, metas;
  for (int64_t c = 0; c < *count; ++c) {
    if (m + 3 > meta.size()) return Bad(in.layer, "CacheList meta state is truncated");
    const std::string& child_class = meta[m];
    const Result<int64_t> n_state = ParseInt64(meta[m + 1]);
    const Result<int64_t> n_meta = ParseInt64(meta[m + 2]);
    m += 3;
    if (!n_state.ok() || !n_meta.ok() || *n_state < 0 || *n_meta < 0 ||
        static_cast<uint64_t>(*n_meta) > meta.size() - m ||
        static_cast<uint64_t>(*n_state) > layer.tensors.size() - t) {
      return Bad(in.layer, "CacheList child " + std::to_string(c) + " counts are invalid or out of range");
    }
    std::vector<std::string> child_meta(meta.begin() + static_cast<ptrdiff_t>(m),
                                        meta.begin() + static_cast<ptrdiff_t>(m + static_cast<size_t>(*n_meta)));
    std::vector<size_t> child_tensors(layer.tensors.begin() + static_cast<ptrdiff_t>(t),
                                      layer.tensors.begin() + static_cast<ptrdiff_t>(t + static_cast<size_t>(*n_state)));
    m += static_cast<size_t>(*n_meta);
    t += static_cast<size_t>(*n_state);
    KV_ASSIGN_OR_RETURN(ParsedLayer child, ParseSwiftLayer(in, child_class, child_meta, child_tensors, depth + 1));
    if (!child.unsupported.ok() && layer.unsupported.ok()) {
      layer.unsupported = Status(child.unsupported.code(),
                                 "child " + std::to_string(c) + ": " + std::string(child.unsupported.message()));
    }
    names.emplace_back(child.class_name);
    metas.push_back(child.meta);
    layer.state.items.push_back(child.state);
    layer.children.push_back(std::move(child));
  }
  if (m != meta.size() || t != layer.tensors.size()) {
    return Bad(in.layer, "CacheList meta state or tensors have entries no child accounts for");
  }
  layer.meta = MetaState(MetaState::List{MetaState(std::move(names)), MetaState(std::move(metas))});
  layer.build_from_children = true;
  return Status::OK();
}

Result<ParsedLayer> ParseSwiftLayer(const SwiftInput& in, const std::string& cls, const std::vector<std::string>& meta,
                                    const std::vector<size_t>& tensors, int depth) {
  ParsedLayer layer;
  layer.saved_by_mlx_lm = false;
  layer.stored_class = cls;
  layer.class_name = cls == "KVCacheSimple" ? "KVCache" : cls;
  layer.stored_meta = MetaState::Strings(meta);
  layer.tensors = tensors;
  const size_t n = tensors.size();
  const std::string& c = layer.class_name;
  if (IsKvClass(c)) {
    KV_RETURN_IF_ERROR(CheckRank4(in, tensors, c));
    layer.empty_state = n == 0;
    for (size_t t : tensors) layer.state.items.push_back(TensorTree::Tensor(t));
  }
  if (c == "KVCache") {
    if (n != 0 && n != 2) return Bad(in.layer, "KVCache has " + std::to_string(n) + " tensors, expected 0 or 2");
    if (meta.size() != 1 || !meta[0].empty()) return Bad(in.layer, "KVCache meta state must be [\"\"]");
    layer.meta = MetaState("");
  } else if (c == "RotatingKVCache") {
    if (n != 0 && n != 2) return Bad(in.layer, "RotatingKVCache has " + std::to_string(n) + " tensors, expected 0 or 2");
    if (meta.size() != 5 && meta.size() != 6) return Bad(in.layer, "RotatingKVCache meta state needs 5 or 6 entries");
    KV_RETURN_IF_ERROR(Ints(in, meta, 5, c).status());
    if (meta.size() == 6 && meta[5] != "modelNative" && meta[5] != "requested") {
      return Bad(in.layer, "RotatingKVCache capacity origin \"" + meta[5] + "\" is unknown");
    }
    layer.meta = IntMeta(meta, {0, 1, 3, 4});  // keep, max_size, offset, _idx (step dropped)
  } else if (c == "QuantizedKVCache") {
    if (n != 0 && n != 4 && n != 6) return Bad(in.layer, "QuantizedKVCache has " + std::to_string(n) + " tensors");
    if (meta.size() != 4) return Bad(in.layer, "QuantizedKVCache meta state needs 4 entries");
    KV_RETURN_IF_ERROR(Ints(in, meta, 4, c).status());
    layer.meta = IntMeta(meta, {1, 2, 3});  // offset, group_size, bits (step dropped)
    if (n == 4) {
      layer.unsupported = Status::NotSupported(
          "QuantizedKVCache without biases (a non-affine mode of mlx-swift-lm) has no mlx-lm equivalent");
    } else if (n == 6) {
      layer.state.items = {TensorTree{TensorTree::Kind::kList, 0, Array(), {layer.state.items[0], layer.state.items[1], layer.state.items[2]}},
                           TensorTree{TensorTree::Kind::kList, 0, Array(), {layer.state.items[3], layer.state.items[4], layer.state.items[5]}}};
    }
  } else if (c == "ChunkedKVCache") {
    if (n != 0 && n != 2) return Bad(in.layer, "ChunkedKVCache has " + std::to_string(n) + " tensors, expected 0 or 2");
    if (meta.size() != 2) return Bad(in.layer, "ChunkedKVCache meta state needs 2 entries");
    layer.meta = MetaState::Strings(meta);
    if (meta[0] == "None") {
      layer.unsupported = Status::NotSupported("ChunkedKVCache with chunk size None has no mlx-lm equivalent");
    } else {
      KV_RETURN_IF_ERROR(Ints(in, meta, 2, c).status());
    }
  } else if (c == "ArraysCache" || c == "MambaCache") {
    KV_RETURN_IF_ERROR(ParseArraysCache(in, meta, layer));
  } else if (c == "CacheList") {
    KV_RETURN_IF_ERROR(ParseCacheList(in, meta, layer, depth));
  } else if (c == "TurboQuantKVCache") {
    layer.meta = layer.stored_meta;
    layer.unsupported = Status::NotSupported("TurboQuantKVCache (mlx-swift-lm only) is not supported");
  } else {
    layer.meta = layer.stored_meta;
    layer.unsupported = Status::NotSupported("unknown cache class \"" + cls + "\"");
  }
  return layer;
}

}  // namespace

Result<bool> IsSwiftLayout(const SafetensorsHeader& h, const MetaTrees& meta) {
  const size_t layers = meta.classes.size();
  std::vector<LayerEvidence> evidence(layers);
  for (const TensorInfo& t : h.tensors) {
    const size_t dot = t.name.find('.');
    if (dot == std::string::npos) continue;
    Result<int64_t> i = ParseInt64(std::string_view(t.name).substr(0, dot));
    if (!i.ok() || *i < 0 || static_cast<size_t>(*i) >= layers) continue;
    LayerEvidence& e = evidence[static_cast<size_t>(*i)];
    ++e.tensors;
    e.nested_tensor_names = e.nested_tensor_names || t.name.find('.', dot + 1) != std::string::npos;
  }
  const NameTree* metas = meta.tree.Child("0");
  std::optional<size_t> mlx_layer, swift_layer;
  for (size_t i = 0; i < layers; ++i) {
    const NameTree* node = metas == nullptr ? nullptr : metas->Child(std::to_string(i));
    const Hint hint = LayerHint(meta.classes[i], node, evidence[i], meta.values);
    if (hint == Hint::kMlxLm && !mlx_layer) mlx_layer = i;
    if (hint == Hint::kSwift && !swift_layer) swift_layer = i;
  }
  if (mlx_layer && swift_layer) {
    return Status::Corruption("layers disagree on the layout: layer " + std::to_string(*mlx_layer) +
                              " is laid out as mlx-lm writes it, layer " + std::to_string(*swift_layer) +
                              " as mlx-swift-lm does");
  }
  return swift_layer.has_value();
}

Status ParseSwiftLayers(const SafetensorsHeader& h, const MetaTrees& meta, ParsedFile& out) {
  const size_t layers = meta.classes.size();
  std::vector<std::vector<std::string>> metas;
  if (const NameTree* node = meta.tree.Child("0")) {
    auto list = node->AsList();
    if (!list) return Status::Corruption("mlx-swift-lm meta states are not a list");
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i] == nullptr) {
        metas.emplace_back();
        continue;
      }
      KV_ASSIGN_OR_RETURN(std::vector<std::string> m, SwiftMeta(*(*list)[i], meta.values, i));
      metas.push_back(std::move(m));
    }
  }
  if (metas.size() != layers) {
    return Status::Corruption("mlx-swift-lm: " + std::to_string(metas.size()) + " meta states for " +
                              std::to_string(layers) + " class names");
  }
  // Tensors are exactly "i.j" with j = 0..n-1 per layer.
  std::vector<std::vector<std::pair<int64_t, size_t>>> slots(layers);  // (j, tensor index)
  for (size_t k = 0; k < h.tensors.size(); ++k) {
    const std::string& name = h.tensors[k].name;
    if (name.starts_with(kSwiftStateTensorPrefix)) continue;
    const size_t dot = name.find('.');
    const std::string_view sv(name);
    Result<int64_t> i = ParseInt64(dot == std::string::npos ? "" : sv.substr(0, dot));
    Result<int64_t> j = ParseInt64(dot == std::string::npos ? "" : sv.substr(dot + 1));
    if (!i.ok() || !j.ok() || *i < 0 || *j < 0 || static_cast<size_t>(*i) >= layers ||
        name != std::to_string(*i) + "." + std::to_string(*j)) {
      return Status::Corruption("mlx-swift-lm: tensor name \"" + name + "\" is not <layer>.<index>");
    }
    slots[static_cast<size_t>(*i)].emplace_back(*j, k);
  }
  for (size_t i = 0; i < layers; ++i) {
    std::sort(slots[i].begin(), slots[i].end());
    std::vector<size_t> tensors;
    for (size_t j = 0; j < slots[i].size(); ++j) {
      if (slots[i][j].first != static_cast<int64_t>(j)) {
        return Bad(i, "tensor " + std::to_string(i) + "." + std::to_string(j) + " is missing");
      }
      tensors.push_back(slots[i][j].second);
    }
    KV_ASSIGN_OR_RETURN(ParsedLayer layer, ParseSwiftLayer(SwiftInput{&h, i}, meta.classes[i], metas[i], tensors, 0));
    out.layers.push_back(std::move(layer));
  }
  return Status::OK();
}

}  // namespace kvstore
