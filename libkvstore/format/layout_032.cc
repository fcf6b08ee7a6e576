// mlx-lm 0.32's layout (docs/format.md §5.9), read and written.
//
// Since mlx-lm PR #1778 a cache's `state` holds its raw buffers and the
// scalars meta_state used to carry; save_prompt_cache stores each non-array
// leaf as a tensor and lists its name and kind in the metadata:
//   "0.<key>"  user metadata
//   "1.<i>"    layer i's class name
//   "2.0"      "" (always present: the detection rule)
//   "2.<k>.0"  the name of a tensor that holds a scalar, a string or None
//   "2.<k>.1"  its kind: "scalar" (0-d int or bool), "string" (int code
//              points; "" is an empty F32 [0]) or "none" (an empty F32 [0])
#include <algorithm>
#include <limits>
#include <map>

#include "libkvstore/format/layout.h"

namespace kvstore {
namespace {

// Strings are class names; a longer one is refused before it is read.
constexpr int64_t kMaxStringCodePoints = int64_t{1} << 16;

int64_t Elements(const TensorInfo& t) { return static_cast<int64_t>(t.nbytes() / DTypeSize(t.dtype)); }

Status Bad032(const std::string& what) { return Status::Corruption("mlx-lm 0.32 layout: " + what); }

enum class LeafKind { kScalar, kString, kNone };

struct ScalarEntry {
  size_t tensor;
  LeafKind kind;
  std::string key;  // "2.k", for messages
};

// The "2." list: entry 0 is "", entries 1.. are [tensor name, kind].
Result<std::vector<ScalarEntry>> ReadScalarList(const SafetensorsHeader& h, const NameTree& node,
                                                const std::vector<std::string>& values) {
  auto list = node.AsList();
  if (!list) return Bad032("the scalar list (2.*) is not a list");
  std::map<std::string_view, size_t> by_name;
  for (size_t i = 0; i < h.tensors.size(); ++i) by_name.emplace(h.tensors[i].name, i);
  std::vector<ScalarEntry> out;
  std::vector<bool> seen(h.tensors.size(), false);
  for (size_t k = 1; k < list->size(); ++k) {
    const std::string key = "2." + std::to_string(k);
    const NameTree* e = (*list)[k];
    auto pair = e == nullptr || e->leaf >= 0 ? std::nullopt : e->AsList();
    if (!pair || pair->size() != 2 || (*pair)[0] == nullptr || (*pair)[1] == nullptr || (*pair)[0]->leaf < 0 ||
        (*pair)[1]->leaf < 0) {
      return Bad032("scalar entry " + key + " is not a [tensor name, kind] pair");
    }
    const std::string& name = values[static_cast<size_t>((*pair)[0]->leaf)];
    const std::string& kind = values[static_cast<size_t>((*pair)[1]->leaf)];
    auto t = by_name.find(name);
    if (t == by_name.end()) return Bad032("scalar entry " + key + " names tensor '" + name + "', which the file lacks");
    if (seen[t->second]) return Bad032("tensor '" + name + "' is listed twice in the scalar list");
    seen[t->second] = true;
    LeafKind lk;
    if (kind == "scalar") {
      lk = LeafKind::kScalar;
    } else if (kind == "string") {
      lk = LeafKind::kString;
    } else if (kind == "none") {
      lk = LeafKind::kNone;
    } else {
      return Status::NotSupported("mlx-lm 0.32 layout: scalar entry " + key + " has the kind \"" + kind +
                                  "\" (known: scalar, string, none)");
    }
    out.push_back(ScalarEntry{t->second, lk, key});
  }
  return out;
}

Result<int64_t> IntegerItem(const Array& a, const std::string& where) {
  if (a.dtype() == DType::kU64) {
    const uint64_t v = a.Contiguous().ToVector<uint64_t>()[0];
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad032(where + " " + std::to_string(v) + " does not fit int64");
    }
    return static_cast<int64_t>(v);
  }
  KV_ASSIGN_OR_RETURN(Array i64, a.AsType(DType::kI64));
  return i64.Contiguous().ToVector<int64_t>()[0];
}

void AppendUtf8(std::string& s, uint32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// What save_prompt_cache stored for a scalar, checked as its loader reads it
// (item() of a 0-d tensor; chr() of each code point; None ignores the bytes,
// which must then be none).
Result<CacheState> ReadLeaf(const ScalarEntry& e, const TensorInfo& t, const TensorArrays& arrays) {
  const std::string where = "tensor '" + t.name + "' (" + e.key + ", " +
                            (e.kind == LeafKind::kScalar ? "scalar" : e.kind == LeafKind::kString ? "string" : "none") +
                            ")";
  if (e.kind == LeafKind::kNone) {
    if (Elements(t) != 0) return Bad032(where + " holds " + std::to_string(Elements(t)) + " elements; None is empty");
    return CacheState::None();
  }
  if (e.kind == LeafKind::kScalar) {
    if (!t.shape.empty()) return Bad032(where + " has shape " + ShapeToString(t.shape) + "; a scalar is 0-d");
    const Array& a = arrays.at(e.tensor);
    if (t.dtype == DType::kBool) return CacheState::Bool(a.Contiguous().ToVector<uint8_t>()[0] != 0);
    if (!IsIntegral(t.dtype)) {
      return Status::NotSupported("mlx-lm 0.32 layout: " + where + " is a " + std::string(DTypeName(t.dtype)) +
                                  " scalar; no mlx-lm cache class stores one (ints and bools only)");
    }
    KV_ASSIGN_OR_RETURN(int64_t v, IntegerItem(a, where));
    return CacheState::Int(v);
  }
  if (Elements(t) == 0 && t.shape.size() == 1) return CacheState::String("");  // mx.array([]): F32 [0]
  if (t.shape.size() != 1 || !IsIntegral(t.dtype) || t.dtype == DType::kBool) {
    return Bad032(where + " is " + std::string(DTypeName(t.dtype)) + " " + ShapeToString(t.shape) +
                  ", not a 1-D array of integer code points");
  }
  if (Elements(t) > kMaxStringCodePoints) {
    return Bad032(where + " has " + std::to_string(Elements(t)) + " code points (at most " +
                  std::to_string(kMaxStringCodePoints) + " are read)");
  }
  KV_ASSIGN_OR_RETURN(Array i64, arrays.at(e.tensor).AsType(DType::kI64));
  std::string s;
  for (int64_t c : i64.Contiguous().ToVector<int64_t>()) {
    // (a U64 beyond int64 wraps negative in the cast)
    if (c < 0 || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
      return Bad032(where + " holds " + std::to_string(c) + ", which is not a Unicode scalar value");
    }
    AppendUtf8(s, static_cast<uint32_t>(c));
  }
  return CacheState::String(std::move(s));
}

// Replaces the leaves that hold scalars by their values.
void ResolveLeaves(TensorTree& t, const std::map<size_t, CacheState>& leaves) {
  if (t.kind == TensorTree::Kind::kTensor) {
    auto it = leaves.find(t.tensor);
    if (it != leaves.end()) t = TensorTree::Value(it->second);
    return;
  }
  for (TensorTree& c : t.items) ResolveLeaves(c, leaves);
}

// CacheList children for inspection: state = [[child state, class name], ...].
void DescribeChildren032(ParsedLayer& layer) {
  if (layer.class_name != "CacheList") return;
  for (const TensorTree& item : layer.state.items) {
    if (item.items.size() != 2 || item.items[1].kind != TensorTree::Kind::kValue || !item.items[1].value.is_string()) {
      return;
    }
  }
  for (const TensorTree& item : layer.state.items) {
    ParsedLayer child;
    child.class_name = child.stored_class = item.items[1].value.str();
    child.state = item.items[0];
    child.full_state = true;
    child.saved_by_mlx_lm = false;
    CollectTensors(child.state, child.tensors);
    DescribeChildren032(child);
    layer.children.push_back(std::move(child));
  }
}

// "0.<key>" user metadata, the "1." and "2." trees.
Status Split032(const SafetensorsHeader& h, ParsedFile& out, NameTree& classes, NameTree& scalars,
                std::vector<std::string>& values) {
  for (const auto& [k, v] : h.metadata) {
    if (k.starts_with("0.")) {
      const std::string user_key = k.substr(2);
      if (!IsKvstoreMetadataKey(user_key)) out.user.emplace_back(user_key, v);
      continue;
    }
    NameTree* tree = k.starts_with("1.") ? &classes : k.starts_with("2.") ? &scalars : nullptr;
    if (tree == nullptr) {
      return Status::NotSupported("unknown prompt-cache layout: metadata key \"" + k +
                                  "\" is outside mlx-lm 0.32's 0./1./2. namespaces");
    }
    KV_RETURN_IF_ERROR(tree->Insert(std::string_view(k).substr(2), static_cast<int64_t>(values.size())));
    values.push_back(v);
  }
  return Status::OK();
}

}  // namespace

Status ParseMlxLm032(const SafetensorsHeader& h, const TensorFetch& fetch, ParsedFile& out) {
  out.layout = PromptCacheLayout::kMlxLm032;
  NameTree classes, scalars;
  std::vector<std::string> values;
  KV_RETURN_IF_ERROR(Split032(h, out, classes, scalars, values));
  std::vector<std::string> class_names;
  if (!classes.children.empty()) {
    auto list = classes.AsList();
    if (!list) return Bad032("the class names (1.*) are not a list");
    for (size_t i = 0; i < list->size(); ++i) {
      const NameTree* c = (*list)[i];
      if (c == nullptr || c->leaf < 0) return Bad032("class name of layer " + std::to_string(i) + " (1." + std::to_string(i) + ") is missing");
      class_names.push_back(values[static_cast<size_t>(c->leaf)]);
    }
  }
  KV_ASSIGN_OR_RETURN(std::vector<ScalarEntry> entries, ReadScalarList(h, scalars, values));

  std::vector<size_t> wanted;
  for (const ScalarEntry& e : entries) {
    if (e.kind != LeafKind::kNone && Elements(h.tensors[e.tensor]) > 0) wanted.push_back(e.tensor);
  }
  TensorArrays arrays;
  if (!wanted.empty()) {
    if (!fetch) return Status::Internal("mlx-lm 0.32 layout: no reader for the scalar tensors");
    for (size_t t : wanted) {
      if (Elements(h.tensors[t]) > kMaxStringCodePoints) {
        return Bad032("tensor '" + h.tensors[t].name + "' listed as a scalar or string has " +
                      std::to_string(Elements(h.tensors[t])) + " elements");
      }
    }
    KV_ASSIGN_OR_RETURN(arrays, fetch(wanted));
  }
  std::map<size_t, CacheState> leaves;
  for (const ScalarEntry& e : entries) {
    KV_ASSIGN_OR_RETURN(leaves[e.tensor], ReadLeaf(e, h.tensors[e.tensor], arrays));
  }

  NameTree names;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    KV_RETURN_IF_ERROR(names.Insert(h.tensors[i].name, static_cast<int64_t>(i)));
  }
  auto tensor_layers = names.AsList();
  if (!tensor_layers) return Bad032("tensor names do not start with a layer index");
  if (tensor_layers->size() > class_names.size()) {
    return Bad032("tensors for " + std::to_string(tensor_layers->size()) + " layers but " +
                  std::to_string(class_names.size()) + " class names");
  }
  for (size_t i = 0; i < class_names.size(); ++i) {
    ParsedLayer layer;
    layer.class_name = layer.stored_class = class_names[i];
    layer.full_state = true;
    layer.saved_by_mlx_lm = false;  // its own invariants: SetFullState's checks
    if (i < tensor_layers->size() && (*tensor_layers)[i] != nullptr) {
      Result<TensorTree> state = TreeFromNames(*(*tensor_layers)[i]);
      if (!state.ok()) return state.status().WithPrefix("layer " + std::to_string(i));
      layer.state = std::move(state).value();
    }
    CollectTensors(layer.state, layer.tensors);
    ResolveLeaves(layer.state, leaves);
    DescribeChildren032(layer);
    out.layers.push_back(std::move(layer));
  }
  return Status::OK();
}

// ---- Writing ----

namespace {

Status FlattenFull(const CacheState& s, const std::string& prefix, FlatLayer& out) {
  auto scalar = [&](Array a, const char* kind) {
    out.tensors.push_back({prefix, std::move(a)});
    out.scalars.emplace_back(prefix, kind);
  };
  if (s.is_array()) {
    out.tensors.push_back({prefix, s.array()});
  } else if (s.is_none()) {
    scalar(Array::Zeros(DType::kF32, {0}), "none");
  } else if (s.is_bool()) {
    const uint8_t v = s.bool_value() ? 1 : 0;
    scalar(Array::FromValues<uint8_t>(DType::kBool, {}, std::span<const uint8_t>(&v, 1)), "scalar");
  } else if (s.is_int()) {
    const int64_t v = s.int_value();
    if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
      const int32_t v32 = static_cast<int32_t>(v);
      scalar(Array::FromValues<int32_t>(DType::kI32, {}, std::span<const int32_t>(&v32, 1)), "scalar");
    } else {
      scalar(Array::FromValues<int64_t>(DType::kI64, {}, std::span<const int64_t>(&v, 1)), "scalar");
    }
  } else if (s.is_string()) {
    // Class names: ASCII identifiers, one code point per byte.
    std::vector<int32_t> codes;
    for (char c : s.str()) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        return Status::InvalidArgument("state entry " + prefix + " is a non-ASCII string");
      }
      codes.push_back(c);
    }
    scalar(codes.empty() ? Array::Zeros(DType::kF32, {0})
                         : Array::FromInt32s(std::span<const int32_t>(codes.data(), codes.size())),
           "string");
  } else {
    for (size_t i = 0; i < s.size(); ++i) KV_RETURN_IF_ERROR(FlattenFull(s[i], prefix + "." + std::to_string(i), out));
  }
  return Status::OK();
}

}  // namespace

Result<FlatLayer> FlattenLayerMlxLm032(const Cache& cache, size_t index) {
  const std::string i = std::to_string(index);
  const std::string where = "layer " + i + " (" + std::string(cache.class_name()) + ")";
  Result<CacheState> state = cache.FullState();
  if (!state.ok()) {
    return Status::InvalidArgument(where + " cannot be saved for mlx-lm 0.32: " + std::string(state.status().message()));
  }
  FlatLayer out;
  KV_RETURN_IF_ERROR(FlattenFull(*state, i, out).WithPrefix(where));
  if (out.tensors.empty()) {
    // Its loader unflattens the tensors into the layer list: a layer with
    // none would be dropped or shift the layers after it.
    return Status::InvalidArgument(where + " has no tensor in mlx-lm 0.32's layout, whose loader would drop it");
  }
  const CacheClassInfo* info = FindCacheClass(cache.class_name());
  out.metadata.emplace_back("1." + i, std::string(info != nullptr ? info->saved_as : cache.class_name()));
  return out;
}

Result<FlatLayer> FlattenLayer(const Cache& cache, size_t index, PromptCacheLayout layout) {
  switch (layout) {
    case PromptCacheLayout::kMlxSwiftLm: return FlattenLayerSwift(cache, index);
    case PromptCacheLayout::kMlxLm032: return FlattenLayerMlxLm032(cache, index);
    default: return FlattenLayerMlxLm(cache, index, layout);
  }
}

}  // namespace kvstore
