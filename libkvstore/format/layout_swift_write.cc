// Writing mlx-swift-lm's prompt-cache layout (docs/format.md §5.6): each
// cache flattened to Swift's flat array list and meta strings.
#include "kvstore/cache_list.h"
#include "libkvstore/format/layout.h"

namespace kvstore {

namespace {

constexpr char kSwiftStep[] = "256";  // mlx-lm's and Swift's growth step

struct SwiftParts {
  std::string cls;
  std::vector<Array> arrays;
  std::vector<std::string> meta;
};

Result<std::string> Csv(const Array& a, const char* what) {
  if (a.numel() == 0) return std::string();
  if (!IsIntegral(a.dtype()) || a.ndim() != 1) {
    return Status::NotSupported(std::string("ArraysCache ") + what + " " + a.Describe() +
                                " is not a 1-D integer array (mlx-swift-lm stores integers)");
  }
  KV_ASSIGN_OR_RETURN(Array wide, a.AsType(DType::kI64));
  std::string out;
  for (int64_t v : wide.ToVector<int64_t>()) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

std::vector<std::string> MetaStrings(const MetaState& m) {
  std::vector<std::string> out;
  for (const MetaState& s : m.list()) out.push_back(s.is_string() ? s.str() : std::string());
  return out;
}

Result<SwiftParts> ToSwift(const Cache& cache, int depth) {
  const std::string_view c = cache.class_name();
  SwiftParts out;
  out.cls = c == "ConcatenateKVCache" ? "KVCache" : std::string(c);
  if (c == "KVCache" || c == "ConcatenateKVCache" || c == "RotatingKVCache" || c == "QuantizedKVCache" ||
      c == "ChunkedKVCache") {
    if (!cache.Empty()) {
      KV_ASSIGN_OR_RETURN(CacheState state, cache.State());
      std::vector<NamedArray> flat;
      KV_RETURN_IF_ERROR(FlattenState(state, "", flat));
      for (NamedArray& a : flat) out.arrays.push_back(std::move(a.array));
    }
    const MetaState meta = cache.meta_state();
    if (c == "RotatingKVCache") {
      std::vector<std::string> m = MetaStrings(meta);  // keep, max_size, offset, _idx
      if (m.size() != 4) return Status::Internal("RotatingKVCache meta state arity");
      out.meta = {m[0], m[1], kSwiftStep, m[2], m[3]};
    } else if (c == "QuantizedKVCache") {
      std::vector<std::string> m = MetaStrings(meta);  // offset, group_size, bits
      if (m.size() != 3) return Status::Internal("QuantizedKVCache meta state arity");
      out.meta = {kSwiftStep, m[0], m[1], m[2]};
    } else if (c == "ChunkedKVCache") {
      out.meta = MetaStrings(meta);
    } else {
      out.meta = {""};
    }
    return out;
  }
  if (c == "ArraysCache" || c == "MambaCache") {
    KV_ASSIGN_OR_RETURN(CacheState state, cache.State());  // [slots, left_padding, lengths]
    std::string present;
    for (size_t s = 0; s < state[0].size(); ++s) {
      if (state[0][s].is_none()) continue;
      out.arrays.push_back(state[0][s].array());
      present += (present.empty() ? "" : ",") + std::to_string(s);
    }
    KV_ASSIGN_OR_RETURN(std::string left, Csv(state[1].array(), "left_padding"));
    KV_ASSIGN_OR_RETURN(std::string lengths, Csv(state[2].array(), "lengths"));
    out.meta = {std::to_string(state[0].size()), present};
    if (!left.empty() || !lengths.empty()) out.meta.push_back(left);
    if (!lengths.empty()) out.meta.push_back(lengths);
    return out;
  }
  if (c == "CacheList") {
    if (depth >= kMaxSwiftCacheListDepth) return Status::InvalidArgument("CacheList nesting too deep");
    const auto& list = static_cast<const CacheList&>(cache);
    out.meta = {std::to_string(list.num_children())};
    for (size_t i = 0; i < list.num_children(); ++i) {
      KV_ASSIGN_OR_RETURN(SwiftParts child, ToSwift(*list.child(i), depth + 1));
      out.meta.push_back(child.cls);
      out.meta.push_back(std::to_string(child.arrays.size()));
      out.meta.push_back(std::to_string(child.meta.size()));
      out.meta.insert(out.meta.end(), child.meta.begin(), child.meta.end());
      out.arrays.insert(out.arrays.end(), child.arrays.begin(), child.arrays.end());
    }
    return out;
  }
  return Status::NotSupported(std::string(c) + " has no mlx-swift-lm equivalent");
}

}  // namespace

Result<FlatLayer> FlattenLayerSwift(const Cache& cache, size_t index) {
  const std::string i = std::to_string(index);
  Result<SwiftParts> parts = ToSwift(cache, 0);
  if (!parts.ok()) return parts.status().WithPrefix("layer " + i);
  FlatLayer out;
  for (size_t j = 0; j < parts->arrays.size(); ++j) out.tensors.push_back({i + "." + std::to_string(j), parts->arrays[j]});
  for (size_t j = 0; j < parts->meta.size(); ++j) out.metadata.emplace_back("0." + i + "." + std::to_string(j), parts->meta[j]);
  out.metadata.emplace_back("2." + i, parts->cls);
  return out;
}

}  // namespace kvstore
