// Cache methods, cache classmethods and object construction (FORMAT.md §3.1, §4.2).
#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "tests/trace_replay/replayer.h"

namespace kvstore::trace {
namespace {

Json EncodeQuantized(const QuantizedArray& q) {
  Json out = Json::MakeArray();
  out.Push(EncodeArray(q.packed));
  out.Push(EncodeArray(q.scales));
  out.Push(EncodeArray(q.biases));
  return out;
}

OpOutput Value(Json v) { return OpOutput{std::move(v), {}}; }

// A returned cache: bound under `result` and encoded as its snapshot.
OpOutput NewCache(std::shared_ptr<Cache> cache) {
  OpOutput out;
  out.value = Snapshot(Object(cache), Json());
  out.bound.push_back(Object(std::move(cache)));
  return out;
}

Status NoAttribute(const Cache& cache, std::string_view member) {
  return Status::NotSupported(std::string(cache.class_name()) + " has no attribute " +
                              std::string(member));
}

bool IsCacheFlavourMask(const Cache& cache) {
  return dynamic_cast<const KVCache*>(&cache) || dynamic_cast<const QuantizedKVCache*>(&cache) ||
         dynamic_cast<const ConcatenateKVCache*>(&cache);
}

Result<Mask> MakeMask(Cache& cache, const Args& args) {
  KV_ASSIGN_OR_RETURN(int64_t n, args.Int("N"));
  MaskOptions options;
  if (IsCacheFlavourMask(cache)) {
    // cache.py's create_attention_mask has no defaults: both are required.
    if (!args.Has("return_array") || !args.Has("window_size")) {
      return Status::InvalidArgument(
          "create_attention_mask() missing required argument return_array/window_size");
    }
  } else if (dynamic_cast<ArraysCache*>(&cache) != nullptr) {
    KV_RETURN_IF_ERROR(args.OnlyAllowed({"N"}));
  }
  KV_ASSIGN_OR_RETURN(options.return_array, args.Bool("return_array", false));
  KV_ASSIGN_OR_RETURN(options.window_size, args.OptionalInt("window_size"));
  return cache.MakeMask(n, options);
}

Result<OpOutput> GetItem(const std::shared_ptr<Cache>& cache, const Args& args) {
  KV_ASSIGN_OR_RETURN(int64_t idx, args.Int("idx"));
  if (auto* list = dynamic_cast<CacheList*>(cache.get())) {
    int64_t n = static_cast<int64_t>(list->num_children());
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) return Status::InvalidArgument("CacheList index out of range");
    OpOutput out;
    out.value = Snapshot(Object(list->child(idx)), Json());
    out.bound.push_back(Object(list->child(idx)));
    return out;
  }
  if (auto* arrays = dynamic_cast<ArraysCache*>(cache.get())) {
    int64_t n = static_cast<int64_t>(arrays->num_slots());
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) return Status::InvalidArgument("ArraysCache index out of range");
    const auto& slot = arrays->slot(static_cast<size_t>(idx));
    return Value(slot ? EncodeArray(*slot) : Json());
  }
  return NoAttribute(*cache, "__getitem__");
}

Result<OpOutput> SetItem(const std::shared_ptr<Cache>& cache, const Args& args) {
  auto* arrays = dynamic_cast<ArraysCache*>(cache.get());
  if (arrays == nullptr) return NoAttribute(*cache, "__setitem__");
  KV_ASSIGN_OR_RETURN(int64_t idx, args.Int("idx"));
  int64_t n = static_cast<int64_t>(arrays->num_slots());
  if (idx < 0) idx += n;
  if (idx < 0 || idx >= n) return Status::InvalidArgument("ArraysCache index out of range");
  KV_ASSIGN_OR_RETURN(std::optional<Array> value, args.OptionalTensor("value"));
  KV_RETURN_IF_ERROR(arrays->SetSlot(static_cast<size_t>(idx), std::move(value)));
  return Value(Json());
}

Result<OpOutput> UpdateAndFetch(Cache& cache, const Args& args) {
  KV_ASSIGN_OR_RETURN(Array keys, args.Tensor("keys"));
  KV_ASSIGN_OR_RETURN(Array values, args.Tensor("values"));
  if (auto* q = dynamic_cast<QuantizedKVCache*>(&cache)) {
    KV_ASSIGN_OR_RETURN(QuantizedKeysValues kv, q->UpdateAndFetchQuantized(keys, values));
    Json out = Json::MakeArray();
    out.Push(EncodeQuantized(kv.keys));
    out.Push(EncodeQuantized(kv.values));
    return Value(std::move(out));
  }
  KV_ASSIGN_OR_RETURN(KeysValues kv, cache.UpdateAndFetch(keys, values));
  Json out = Json::MakeArray();
  out.Push(EncodeArray(kv.keys));
  out.Push(EncodeArray(kv.values));
  return Value(std::move(out));
}

Result<std::vector<int64_t>> BatchIndices(const Args& args) {
  KV_ASSIGN_OR_RETURN(std::vector<int32_t> idx, args.Ints("batch_indices"));
  return std::vector<int64_t>(idx.begin(), idx.end());
}

std::vector<const Cache*> RawPointers(const std::vector<std::shared_ptr<Cache>>& caches) {
  std::vector<const Cache*> out;
  for (const auto& c : caches) out.push_back(c.get());
  return out;
}

}  // namespace

Result<OpOutput> CallCacheMethod(const std::shared_ptr<Cache>& cache, std::string_view method,
                                 const Args& args) {
  Cache& c = *cache;
  if (method == "update_and_fetch") return UpdateAndFetch(c, args);
  if (method == "state") {
    KV_ASSIGN_OR_RETURN(CacheState s, c.State());
    return Value(EncodeState(s));
  }
  if (method == "offset" || method == "left_padding" || method == "lengths" ||
      method == "batch_size" || method == "meta_state" || method == "nbytes") {
    Json probe = Json::MakeObject();
    probe[method] = Json();
    Json snap = Snapshot(Object(cache), probe);
    Json v = *snap.Find(method);
    if (v.is_object() && v.Find("raises")) {
      return Status::NotSupported(v.Find("raises")->as_string());
    }
    return Value(std::move(v));
  }
  if (method == "size") return Value(Json(c.Size()));
  if (method == "empty") return Value(Json(c.Empty()));
  if (method == "is_trimmable") return Value(Json(c.IsTrimmable()));
  if (method == "trim") {
    KV_ASSIGN_OR_RETURN(int64_t n, args.Int("n"));
    KV_ASSIGN_OR_RETURN(int64_t trimmed, c.Trim(n));
    return Value(Json(trimmed));
  }
  if (method == "make_mask") {
    KV_ASSIGN_OR_RETURN(Mask mask, MakeMask(c, args));
    return Value(EncodeMask(mask));
  }
  if (method == "copy") return NewCache(std::shared_ptr<Cache>(c.Copy()));
  if (method == "__getitem__") return GetItem(cache, args);
  if (method == "__setitem__") return SetItem(cache, args);
  if (method == "to_quantized") {
    auto* kv = dynamic_cast<KVCache*>(&c);
    if (kv == nullptr) return NoAttribute(c, "to_quantized");
    KV_ASSIGN_OR_RETURN(int64_t group_size, args.Int("group_size", 64));
    KV_ASSIGN_OR_RETURN(int64_t bits, args.Int("bits", 4));
    KV_ASSIGN_OR_RETURN(auto q, kv->ToQuantized(static_cast<int>(group_size),
                                                static_cast<int>(bits)));
    return NewCache(std::shared_ptr<Cache>(std::move(q)));
  }
  if (method == "maybe_trim_front") {
    auto* chunked = dynamic_cast<ChunkedKVCache*>(&c);
    if (chunked == nullptr) return NoAttribute(c, "maybe_trim_front");
    KV_RETURN_IF_ERROR(chunked->MaybeTrimFront());
    return Value(Json());
  }
  if (method == "prepare") {
    PrepareArgs p;
    KV_ASSIGN_OR_RETURN(p.left_padding, args.OptionalInts("left_padding"));
    KV_ASSIGN_OR_RETURN(p.lengths, args.OptionalInts("lengths"));
    KV_ASSIGN_OR_RETURN(p.right_padding, args.OptionalInts("right_padding"));
    KV_RETURN_IF_ERROR(c.Prepare(p));
    return Value(Json());
  }
  if (method == "finalize") {
    KV_RETURN_IF_ERROR(c.Finalize());
    return Value(Json());
  }
  if (method == "advance") {
    auto* arrays = dynamic_cast<ArraysCache*>(&c);
    if (arrays == nullptr) return NoAttribute(c, "advance");
    KV_ASSIGN_OR_RETURN(int64_t n, args.Int("N"));
    KV_RETURN_IF_ERROR(arrays->Advance(n));
    return Value(Json());
  }
  if (method == "filter") {
    KV_ASSIGN_OR_RETURN(std::vector<int64_t> idx, BatchIndices(args));
    KV_RETURN_IF_ERROR(c.Filter(idx));
    return Value(Json());
  }
  if (method == "extend") {
    KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> other, args.CacheRef("other"));
    KV_RETURN_IF_ERROR(c.Extend(*other));
    return Value(Json());
  }
  if (method == "extract") {
    KV_ASSIGN_OR_RETURN(int64_t idx, args.Int("idx"));
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> out, c.Extract(idx));
    return NewCache(std::shared_ptr<Cache>(std::move(out)));
  }
  return Status::NotSupported("trace_replay: unknown cache method " + std::string(method));
}

Result<OpOutput> CallClassMethod(std::string_view cls, std::string_view method, const Args& args) {
  if (method == "from_state") {
    KV_ASSIGN_OR_RETURN(CacheState state, args.State("state"));
    KV_ASSIGN_OR_RETURN(MetaState meta, args.Meta("meta_state"));
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> cache, CacheFromState(cls, state, meta));
    return NewCache(std::shared_ptr<Cache>(std::move(cache)));
  }
  if (method == "merge") {
    KV_ASSIGN_OR_RETURN(auto caches, args.CacheRefs("caches"));
    std::vector<const Cache*> raw = RawPointers(caches);
    std::unique_ptr<Cache> merged;
    if (cls == "KVCache" || cls == "BatchKVCache") {
      KV_ASSIGN_OR_RETURN(merged, BatchKVCache::Merge(raw));
    } else if (cls == "RotatingKVCache" || cls == "BatchRotatingKVCache") {
      KV_ASSIGN_OR_RETURN(merged, BatchRotatingKVCache::Merge(raw));
    } else if (cls == "ArraysCache") {
      KV_ASSIGN_OR_RETURN(merged, ArraysCache::Merge(raw));
    } else if (cls == "CacheList") {
      KV_ASSIGN_OR_RETURN(merged, CacheList::Merge(raw));
    } else {
      return Status::NotSupported(std::string(cls) + " has no attribute merge");
    }
    return NewCache(std::shared_ptr<Cache>(std::move(merged)));
  }
  return Status::NotSupported("trace_replay: unknown classmethod " + std::string(cls) + "." +
                              std::string(method));
}

Result<Object> ConstructObject(std::string_view cls, const Args& args) {
  if (cls == "KVCache") return Object(std::shared_ptr<Cache>(std::make_shared<KVCache>()));
  if (cls == "ConcatenateKVCache") {
    return Object(std::shared_ptr<Cache>(std::make_shared<ConcatenateKVCache>()));
  }
  if (cls == "RotatingKVCache") {
    KV_ASSIGN_OR_RETURN(int64_t max_size, args.Int("max_size"));
    KV_ASSIGN_OR_RETURN(int64_t keep, args.Int("keep", 0));
    return Object(std::shared_ptr<Cache>(std::make_shared<RotatingKVCache>(max_size, keep)));
  }
  if (cls == "QuantizedKVCache") {
    KV_ASSIGN_OR_RETURN(int64_t group_size, args.Int("group_size", 64));
    KV_ASSIGN_OR_RETURN(int64_t bits, args.Int("bits", 8));
    return Object(std::shared_ptr<Cache>(std::make_shared<QuantizedKVCache>(
        static_cast<int>(group_size), static_cast<int>(bits))));
  }
  if (cls == "ChunkedKVCache") {
    KV_ASSIGN_OR_RETURN(std::optional<int64_t> chunk, args.OptionalInt("chunk_size"));
    return Object(std::shared_ptr<Cache>(std::make_shared<ChunkedKVCache>(chunk)));
  }
  if (cls == "ArraysCache" || cls == "MambaCache") {
    KV_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> lp, args.OptionalInts("left_padding"));
    if (cls == "MambaCache") {
      return Object(std::shared_ptr<Cache>(std::make_shared<MambaCache>(lp.value_or(std::vector<int32_t>{}))));
    }
    KV_ASSIGN_OR_RETURN(int64_t size, args.Int("size"));
    if (size < 0) return Status::InvalidArgument("ArraysCache size < 0");
    return Object(std::shared_ptr<Cache>(std::make_shared<ArraysCache>(
        static_cast<size_t>(size), lp.value_or(std::vector<int32_t>{}))));
  }
  if (cls == "CacheList") {
    KV_ASSIGN_OR_RETURN(auto children, args.CacheRefs("caches"));
    return Object(std::shared_ptr<Cache>(std::make_shared<CacheList>(std::move(children))));
  }
  if (cls == "BatchKVCache") {
    KV_ASSIGN_OR_RETURN(std::vector<int32_t> lp, args.Ints("left_padding"));
    return Object(std::shared_ptr<Cache>(std::make_shared<BatchKVCache>(std::move(lp))));
  }
  if (cls == "BatchRotatingKVCache") {
    KV_ASSIGN_OR_RETURN(int64_t max_size, args.Int("max_size"));
    KV_ASSIGN_OR_RETURN(std::vector<int32_t> lp, args.Ints("left_padding"));
    return Object(
        std::shared_ptr<Cache>(std::make_shared<BatchRotatingKVCache>(max_size, std::move(lp))));
  }
  if (cls == "TokenBuffer") {
    std::vector<int32_t> tokens;
    if (args.HasValue("tokens")) {
      KV_ASSIGN_OR_RETURN(tokens, args.Ints("tokens"));
    }
    return Object(std::make_shared<TokenBuffer>(tokens));
  }
  if (cls == "PromptTrie") return Object(std::make_shared<TrieOfJson>());
  if (cls == "LRUPromptCache") {
    KV_ASSIGN_OR_RETURN(int64_t max_size, args.Int("max_size", 10));
    int64_t max_bytes = LRUPromptCache::kNoLimit;  // Python's default is 2**63
    if (const Json* raw = args.Raw("max_bytes"); raw && raw->type() == Json::Type::kInt) {
      max_bytes = raw->as_int();
    }
    return Object(std::make_shared<LRUPromptCache>(max_size, max_bytes));
  }
  return Status::NotSupported("trace_replay: unknown class " + std::string(cls));
}

}  // namespace kvstore::trace
