// TokenBuffer, PromptTrie and LRUPromptCache ops (FORMAT.md §4.2).
#include "tests/trace_replay/replayer.h"

namespace kvstore::trace {
namespace {

OpOutput Value(Json v) { return OpOutput{std::move(v), {}}; }

Json OptionalTokens(const std::optional<std::vector<int32_t>>& t) {
  return t ? EncodeInts(*t) : Json();
}

Result<OpOutput> TokenBufferOp(TokenBuffer& tb, std::string_view method, const Args& args) {
  if (method == "update_and_fetch") {
    const Json* raw = args.Raw("tokens");
    if (raw == nullptr || !raw->is_object()) {
      // Upstream needs an mx.array here; a Python list raises.
      return Status::InvalidArgument("TokenBuffer.update_and_fetch needs an array");
    }
    KV_ASSIGN_OR_RETURN(Array tokens, args.Tensor("tokens"));
    KV_ASSIGN_OR_RETURN(std::span<const int32_t> out, tb.UpdateAndFetch(tokens));
    return Value(EncodeArray(Array::FromInt32s(out)));
  }
  if (method == "state") return Value(EncodeArray(Array::FromInt32s(tb.state())));
  if (method == "tokens") return Value(EncodeArray(Array::FromInt32s(tb.tokens())));
  if (method == "len") return Value(Json(tb.size()));
  return Status::NotSupported("TokenBuffer has no attribute " + std::string(method));
}

Result<OpOutput> TrieOp(TrieOfJson& trie, std::string_view method, const Args& args) {
  KV_ASSIGN_OR_RETURN(std::string model, args.String("model"));
  KV_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, args.Ints("tokens"));
  if (method == "add") {
    const Json* value = args.Raw("value");
    std::optional<Json> prev = trie.Add(model, tokens, value ? *value : Json());
    return Value(prev ? *prev : Json());
  }
  if (method == "get") {
    KV_ASSIGN_OR_RETURN(Json v, trie.Get(model, tokens));
    return Value(std::move(v));
  }
  if (method == "pop") {
    KV_ASSIGN_OR_RETURN(Json v, trie.Pop(model, tokens));
    return Value(std::move(v));
  }
  if (method == "pop_prefixes") {
    KV_ASSIGN_OR_RETURN(auto popped, trie.PopPrefixes(model, tokens));
    Json out = Json::MakeArray();
    for (auto& [length, value] : popped) {
      Json pair = Json::MakeArray();
      pair.Push(Json(length));
      pair.Push(std::move(value));
      out.Push(std::move(pair));
    }
    return Value(std::move(out));
  }
  if (method == "search") {
    PromptTrieResult r = trie.Search(model, tokens);
    Json out = Json::MakeObject();
    out["model"] = Json(r.model);
    out["exact"] = OptionalTokens(r.exact);
    out["shorter"] = OptionalTokens(r.shorter);
    out["longer"] = OptionalTokens(r.longer);
    out["common_prefix"] = Json(r.common_prefix);
    return Value(std::move(out));
  }
  return Status::NotSupported("PromptTrie has no attribute " + std::string(method));
}

Result<OpOutput> LruOp(LRUPromptCache& lru, std::string_view method, const Args& args) {
  if (method == "len") return Value(Json(lru.size()));
  if (method == "nbytes") return Value(Json(lru.nbytes()));
  if (method == "stats_by_type") return Value(LruStats(lru));
  if (method == "trim_to") {
    KV_ASSIGN_OR_RETURN(std::optional<int64_t> n_seq, args.OptionalInt("n_sequences"));
    KV_ASSIGN_OR_RETURN(std::optional<int64_t> n_bytes, args.OptionalInt("n_bytes"));
    lru.TrimTo(n_seq, n_bytes);
    return Value(Json());
  }
  KV_ASSIGN_OR_RETURN(std::string model, args.String("model"));
  KV_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, args.Ints("tokens"));
  if (method == "insert_cache") {
    KV_ASSIGN_OR_RETURN(PromptCache caches, args.CacheRefs("prompt_cache"));
    CacheType type = CacheType::kAssistant;
    if (args.HasValue("cache_type")) {
      KV_ASSIGN_OR_RETURN(std::string name, args.String("cache_type"));
      KV_ASSIGN_OR_RETURN(type, ParseCacheType(name));
    }
    KV_RETURN_IF_ERROR(lru.InsertCache(model, tokens, std::move(caches), type));
    return Value(Json());
  }
  if (method == "fetch_nearest_cache") {
    KV_ASSIGN_OR_RETURN(LRUPromptCache::FetchResult r, lru.FetchNearestCache(model, tokens));
    OpOutput out;
    out.value = Json::MakeObject();
    if (r.cache) {
      Json caches = Json::MakeArray();
      for (auto& c : *r.cache) {
        caches.Push(Snapshot(Object(c), Json()));
        out.bound.push_back(Object(c));
      }
      out.value["cache"] = std::move(caches);
    } else {
      out.value["cache"] = Json();
    }
    out.value["remaining"] = EncodeInts(r.remaining);
    return out;
  }
  return Status::NotSupported("LRUPromptCache has no attribute " + std::string(method));
}

}  // namespace

Result<OpOutput> CallReuseMethod(const Object& target, std::string_view method, const Args& args) {
  if (auto* tb = std::get_if<std::shared_ptr<TokenBuffer>>(&target)) {
    return TokenBufferOp(**tb, method, args);
  }
  if (auto* trie = std::get_if<std::shared_ptr<TrieOfJson>>(&target)) {
    return TrieOp(**trie, method, args);
  }
  if (auto* lru = std::get_if<std::shared_ptr<LRUPromptCache>>(&target)) {
    return LruOp(**lru, method, args);
  }
  return Status::Internal("trace_replay: unknown object kind");
}

}  // namespace kvstore::trace
