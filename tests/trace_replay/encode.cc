// Encoding of results and snapshots as FORMAT.md §5-§6 describe, and the
// comparison rules of §7.
#include <cstring>

#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/cache_list.h"
#include "libkvstore/integrity/sha256.h"
#include "tests/trace_replay/replayer.h"

namespace kvstore::trace {
namespace {

constexpr int64_t kMaxListedValues = 4096;

// Nested list of elements of `dims` starting at flat index `pos`.
Json NestedValues(const Array& a, const std::vector<std::byte>& bytes, size_t dim, size_t& pos) {
  Json out = Json::MakeArray();
  if (dim == a.shape().size()) return out;
  for (int64_t i = 0; i < a.shape()[dim]; ++i) {
    if (dim + 1 < a.shape().size()) {
      out.Push(NestedValues(a, bytes, dim + 1, pos));
    } else if (a.dtype() == DType::kBool) {
      out.Push(Json(bytes[pos++] != std::byte{0}));
    } else {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * pos++, 4);
      out.Push(Json(int64_t{v}));
    }
  }
  return out;
}

}  // namespace

Json EncodeArray(const Array& array) {
  Json out = Json::MakeObject();
  Json shape = Json::MakeArray();
  for (int64_t d : array.shape()) shape.Push(Json(d));
  out["shape"] = std::move(shape);
  out["dtype"] = Json(std::string(DTypeName(array.dtype())));
  out["sha256"] = Json(Sha256(array).ToHex());
  if ((array.dtype() == DType::kBool || array.dtype() == DType::kI32) &&
      array.numel() < kMaxListedValues) {
    std::vector<std::byte> bytes = array.ToBytes();
    size_t pos = 0;
    if (array.ndim() == 0) {
      int32_t v = 0;
      std::memcpy(&v, bytes.data(), array.itemsize());
      out["values"] = array.dtype() == DType::kBool ? Json(v != 0) : Json(int64_t{v});
    } else {
      out["values"] = NestedValues(array, bytes, 0, pos);
    }
  }
  return out;
}

Json EncodeMask(const Mask& mask) {
  Json out = Json::MakeObject();
  switch (mask.kind) {
    case Mask::Kind::kNone: out["kind"] = "none"; break;
    case Mask::Kind::kCausal: out["kind"] = "causal"; break;
    case Mask::Kind::kArray: {
      out["kind"] = "array";
      const Json array = EncodeArray(mask.array);
      for (const auto& [k, v] : array.as_object()) out[k] = v;
      break;
    }
  }
  return out;
}

Json EncodeState(const CacheState& state) {
  if (state.is_none()) return Json();
  if (state.is_array()) return EncodeArray(state.array());
  Json out = Json::MakeArray();
  for (const CacheState& item : state.list()) out.Push(EncodeState(item));
  return out;
}

Json EncodeMeta(const MetaState& meta) {
  if (meta.is_string()) return Json(meta.str());
  Json out = Json::MakeArray();
  for (const MetaState& item : meta.list()) out.Push(EncodeMeta(item));
  return out;
}

Json EncodeInts(std::span<const int32_t> values) {
  Json out = Json::MakeArray();
  for (int32_t v : values) out.Push(Json(int64_t{v}));
  return out;
}

Json Raises(const Status& status) {
  Json out = Json::MakeObject();
  out["raises"] = Json(status.ToString());
  return out;
}

namespace {

template <typename T>
Json OrRaises(const Result<T>& r, Json (*encode)(const T&)) {
  return r.ok() ? encode(*r) : Raises(r.status());
}

Json IntJson(const int64_t& v) { return Json(v); }

Json OptionalArray(const std::optional<Array>& a) { return a ? EncodeArray(*a) : Json(); }

Json CacheProperty(const Cache& cache, std::string_view key, const Json& expected) {
  if (key == "class") return Json(std::string(cache.class_name()));
  if (key == "offset") {
    if (auto* b = dynamic_cast<const BatchKVCache*>(&cache)) return EncodeArray(b->offsets());
    if (auto* b = dynamic_cast<const BatchRotatingKVCache*>(&cache)) {
      return EncodeArray(b->offsets());
    }
    if (cache.offset()) return Json(*cache.offset());
    return Raises(Status::NotSupported("no offset"));
  }
  if (key == "left_padding") {
    if (auto* a = dynamic_cast<const ArraysCache*>(&cache)) return OptionalArray(a->left_padding());
    if (auto* b = dynamic_cast<const BatchKVCache*>(&cache)) return EncodeArray(b->left_padding());
    if (auto* b = dynamic_cast<const BatchRotatingKVCache*>(&cache)) {
      return EncodeArray(b->left_padding());
    }
    return Raises(Status::NotSupported("no left_padding"));
  }
  if (key == "lengths") {
    if (auto* a = dynamic_cast<const ArraysCache*>(&cache)) return OptionalArray(a->lengths());
    return Raises(Status::NotSupported("no lengths"));
  }
  if (key == "batch_size") {
    if (auto* a = dynamic_cast<const ArraysCache*>(&cache)) return Json(a->batch_size());
    return Raises(Status::NotSupported("no batch_size"));
  }
  if (key == "meta_state") return EncodeMeta(cache.meta_state());
  if (key == "state") return OrRaises<CacheState>(cache.State(), &EncodeState);
  if (key == "size") return Json(cache.Size());
  if (key == "empty") return Json(cache.Empty());
  if (key == "nbytes") return OrRaises<int64_t>(cache.Nbytes(), &IntJson);
  if (key == "is_trimmable") return Json(cache.IsTrimmable());
  if (key == "children") {
    Json out = Json::MakeArray();
    if (auto* list = dynamic_cast<const CacheList*>(&cache)) {
      for (size_t i = 0; i < list->num_children(); ++i) {
        const Json* child_expected =
            expected.is_array() && i < expected.size() ? &expected.as_array()[i] : nullptr;
        out.Push(Snapshot(Object(list->child(i)), child_expected ? *child_expected : Json()));
      }
    }
    return out;
  }
  return Raises(Status::NotSupported("unknown snapshot key " + std::string(key)));
}

// The keys of a cache snapshot (FORMAT.md §6), by class.
std::vector<std::string_view> DefaultCacheKeys(const Cache& cache) {
  std::vector<std::string_view> keys = {"class"};
  const bool arrays = dynamic_cast<const ArraysCache*>(&cache) != nullptr;
  const bool list = dynamic_cast<const CacheList*>(&cache) != nullptr;
  const bool batch = dynamic_cast<const BatchKVCache*>(&cache) != nullptr ||
                     dynamic_cast<const BatchRotatingKVCache*>(&cache) != nullptr;
  if (!arrays && !list) keys.push_back("offset");
  if (arrays || batch) keys.push_back("left_padding");
  if (arrays) {
    keys.push_back("lengths");
    keys.push_back("batch_size");
  }
  for (std::string_view k : {"meta_state", "state", "size", "empty", "nbytes", "is_trimmable"}) {
    keys.push_back(k);
  }
  if (list) keys.push_back("children");
  return keys;
}

Json CacheSnapshot(const Cache& cache, const Json& expected) {
  Json out = Json::MakeObject();
  if (expected.is_object()) {
    for (const auto& [key, value] : expected.as_object()) {
      if (key == "internal") continue;
      out[key] = CacheProperty(cache, key, value);
    }
  } else {
    for (std::string_view key : DefaultCacheKeys(cache)) out[key] = CacheProperty(cache, key, Json());
  }
  return out;
}

Json TrieNode(const TrieOfJson::NodeView& node) {
  Json out = Json::MakeObject();
  if (const Json* v = node.value()) out["value"] = *v;
  Json children = Json::MakeArray();
  for (size_t i = 0; i < node.num_children(); ++i) {
    Json pair = Json::MakeArray();
    pair.Push(Json(int64_t{node.child_token(i)}));
    pair.Push(TrieNode(node.child(i)));
    children.Push(std::move(pair));
  }
  out["children"] = std::move(children);
  return out;
}

Json TrieSnapshot(const TrieOfJson& trie) {
  Json out = Json::MakeObject();
  out["class"] = "PromptTrie";
  Json roots = Json::MakeArray();
  for (size_t i = 0; i < trie.num_models(); ++i) {
    Json pair = Json::MakeArray();
    pair.Push(Json(std::string(trie.model_name(i))));
    pair.Push(TrieNode(trie.root(i)));
    roots.Push(std::move(pair));
  }
  out["trie"] = std::move(roots);
  return out;
}

Json TokenBufferSnapshot(const TokenBuffer& tb) {
  Json out = Json::MakeObject();
  out["class"] = "TokenBuffer";
  auto arr = [](std::span<const int32_t> v) {
    return EncodeArray(Array::FromInt32s(v));
  };
  out["state"] = arr(tb.state());
  out["tokens"] = arr(tb.tokens());
  return out;
}

}  // namespace

Json LruStats(const LRUPromptCache& lru) {
  Json out = Json::MakeObject();
  auto stats = lru.StatsByType();
  for (CacheType t : kCacheTypes) {
    Json s = Json::MakeObject();
    s["n_sequences"] = Json(stats[static_cast<size_t>(t)].n_sequences);
    s["n_bytes"] = Json(stats[static_cast<size_t>(t)].n_bytes);
    out[CacheTypeName(t)] = std::move(s);
  }
  return out;
}

namespace {

Json LruSnapshot(const LRUPromptCache& lru) {
  Json out = Json::MakeObject();
  out["class"] = "LRUPromptCache";
  out["len"] = Json(lru.size());
  out["nbytes"] = Json(lru.nbytes());
  out["stats_by_type"] = LruStats(lru);
  Json order = Json::MakeObject();
  for (CacheType t : kCacheTypes) {
    Json queue = Json::MakeArray();
    for (const PromptKey& key : lru.Order(t)) {
      Json pair = Json::MakeArray();
      pair.Push(Json(key.model));
      pair.Push(EncodeInts(key.tokens));
      queue.Push(std::move(pair));
    }
    order[CacheTypeName(t)] = std::move(queue);
  }
  out["order"] = std::move(order);
  Json entries = Json::MakeArray();
  for (const LRUPromptCache::EntryInfo& e : lru.Entries()) {
    Json entry = Json::MakeObject();
    entry["model"] = Json(e.model);
    entry["tokens"] = EncodeInts(e.tokens);
    entry["cache_type"] = Json(std::string(CacheTypeName(e.cache_type)));
    entry["nbytes"] = Json(e.nbytes);
    Json classes = Json::MakeArray();
    for (const std::string& c : e.classes) classes.Push(Json(c));
    entry["classes"] = std::move(classes);
    entries.Push(std::move(entry));
  }
  out["entries"] = std::move(entries);
  return out;
}

}  // namespace

Json Snapshot(const Object& object, const Json& expected) {
  return std::visit(
      [&](const auto& ptr) -> Json {
        using T = std::decay_t<decltype(*ptr)>;
        if constexpr (std::is_same_v<T, Cache>) {
          return CacheSnapshot(*ptr, expected);
        } else if constexpr (std::is_same_v<T, TokenBuffer>) {
          return TokenBufferSnapshot(*ptr);
        } else if constexpr (std::is_same_v<T, TrieOfJson>) {
          return TrieSnapshot(*ptr);
        } else {
          return LruSnapshot(*ptr);
        }
      },
      object);
}

namespace {

bool IsRaises(const Json& j) { return j.is_object() && j.Find("raises") != nullptr; }

std::string Short(const Json& j) {
  std::string s = j.Dump();
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

}  // namespace

void Compare(const Json& expected, const Json& actual, const std::string& path,
             std::vector<std::string>& diffs) {
  if (IsRaises(expected)) {
    if (!IsRaises(actual)) {
      diffs.push_back(path + ": expected raise " + Short(expected) + ", got " + Short(actual));
    }
    return;
  }
  if (IsRaises(actual)) {
    diffs.push_back(path + ": expected " + Short(expected) + ", got " + Short(actual));
    return;
  }
  if (expected.is_object() && actual.is_object()) {
    for (const auto& [key, value] : expected.as_object()) {
      if (key == "internal") continue;
      const Json* mine = actual.Find(key);
      if (mine == nullptr) {
        diffs.push_back(path + "." + key + ": missing (expected " + Short(value) + ")");
        continue;
      }
      Compare(value, *mine, path + "." + key, diffs);
    }
    for (const auto& [key, value] : actual.as_object()) {
      if (key != "internal" && expected.Find(key) == nullptr) {
        diffs.push_back(path + "." + key + ": unexpected " + Short(value));
      }
    }
    return;
  }
  if (expected.is_array() && actual.is_array()) {
    if (expected.size() != actual.size()) {
      diffs.push_back(path + ": expected " + std::to_string(expected.size()) + " items " +
                      Short(expected) + ", got " + std::to_string(actual.size()) + " " +
                      Short(actual));
      return;
    }
    for (size_t i = 0; i < expected.size(); ++i) {
      Compare(expected.as_array()[i], actual.as_array()[i], path + "[" + std::to_string(i) + "]",
              diffs);
    }
    return;
  }
  if (expected != actual) {
    diffs.push_back(path + ": expected " + Short(expected) + ", got " + Short(actual));
  }
}

}  // namespace kvstore::trace
