// Module functions: cache.py helpers, masks and mx.quantize/dequantize (FORMAT.md §4.2).
#include "kvstore/mask.h"
#include "kvstore/prompt_cache.h"
#include "kvstore/quantize.h"
#include "tests/trace_replay/replayer.h"

namespace kvstore::trace {
namespace {

OpOutput Value(Json v) { return OpOutput{std::move(v), {}}; }

Result<OpOutput> MakePromptCacheOp(const Args& args) {
  const Json* model = args.Raw("model");
  const Json* layers = model ? model->Find("num_layers") : nullptr;
  if (layers == nullptr || layers->type() != Json::Type::kInt || layers->as_int() < 0) {
    return Status::InvalidArgument("make_prompt_cache: model lacks num_layers");
  }
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> max_kv, args.OptionalInt("max_kv_size"));
  PromptCache caches = MakePromptCache(layers->as_int(), max_kv);
  OpOutput out;
  out.value = Json::MakeArray();
  for (auto& c : caches) {
    out.value.Push(Snapshot(Object(c), Json()));
    out.bound.push_back(Object(c));
  }
  return out;
}

Result<OpOutput> CreateCausalMaskOp(const Args& args) {
  KV_ASSIGN_OR_RETURN(int64_t n, args.Int("N"));
  CausalMaskOptions options;
  KV_ASSIGN_OR_RETURN(options.offset, args.Int("offset", 0));
  KV_ASSIGN_OR_RETURN(options.window_size, args.OptionalInt("window_size"));
  KV_ASSIGN_OR_RETURN(auto right, args.OptionalInts("right_padding"));
  KV_ASSIGN_OR_RETURN(auto left, args.OptionalInts("left_padding"));
  if (right) options.right_padding = std::span<const int32_t>(*right);
  if (left) options.left_padding = std::span<const int32_t>(*left);
  KV_ASSIGN_OR_RETURN(Array mask, CreateCausalMask(n, options));
  return Value(EncodeMask(Mask::FromArray(std::move(mask))));
}

Result<OpOutput> CreateAttentionMaskOp(const Args& args) {
  for (std::string_view required : {"N", "offset", "return_array", "window_size"}) {
    if (!args.Has(required)) {
      return Status::InvalidArgument("create_attention_mask() missing argument " +
                                     std::string(required));
    }
  }
  KV_ASSIGN_OR_RETURN(int64_t n, args.Int("N"));
  KV_ASSIGN_OR_RETURN(int64_t offset, args.Int("offset"));
  KV_ASSIGN_OR_RETURN(bool return_array, args.Bool("return_array", false));
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> window, args.OptionalInt("window_size"));
  KV_ASSIGN_OR_RETURN(Mask mask, CreateAttentionMask(n, offset, return_array, window));
  return Value(EncodeMask(mask));
}

Result<OpOutput> ModelAttentionMaskOp(const Args& args) {
  KV_ASSIGN_OR_RETURN(Array h, args.Tensor("h"));
  if (h.ndim() < 2) return Status::InvalidArgument("h must have at least 2 dims");
  std::shared_ptr<Cache> cache;
  if (args.HasValue("cache")) {
    KV_ASSIGN_OR_RETURN(cache, args.CacheRef("cache"));
  }
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> window, args.OptionalInt("window_size"));
  KV_ASSIGN_OR_RETURN(bool return_array, args.Bool("return_array", false));
  KV_ASSIGN_OR_RETURN(Mask mask, CreateModelAttentionMask(h.dim(1), cache.get(), window, return_array));
  return Value(EncodeMask(mask));
}

Result<OpOutput> QuantizeOp(const Args& args) {
  KV_ASSIGN_OR_RETURN(Array w, args.Tensor("w"));
  QuantizeOptions options;
  KV_ASSIGN_OR_RETURN(int64_t group_size, args.Int("group_size", 64));
  KV_ASSIGN_OR_RETURN(int64_t bits, args.Int("bits", 4));
  options.group_size = static_cast<int>(group_size);
  options.bits = static_cast<int>(bits);
  KV_ASSIGN_OR_RETURN(QuantizedArray q, Quantize(w, options));
  Json out = Json::MakeArray();
  out.Push(EncodeArray(q.packed));
  out.Push(EncodeArray(q.scales));
  out.Push(EncodeArray(q.biases));
  return Value(std::move(out));
}

Result<OpOutput> DequantizeOp(const Args& args) {
  QuantizedArray q;
  KV_ASSIGN_OR_RETURN(q.packed, args.Tensor("w"));
  KV_ASSIGN_OR_RETURN(q.scales, args.Tensor("scales"));
  KV_ASSIGN_OR_RETURN(q.biases, args.Tensor("biases"));
  KV_ASSIGN_OR_RETURN(int64_t group_size, args.Int("group_size", 64));
  KV_ASSIGN_OR_RETURN(int64_t bits, args.Int("bits", 4));
  std::optional<DType> dtype;
  if (const Json* d = args.Raw("dtype"); d && d->is_object()) {
    const Json* name = d->Find("dtype");
    if (name == nullptr || !name->is_string() || !ParseDType(name->as_string())) {
      return Status::InvalidArgument("dequantize: bad dtype argument");
    }
    dtype = ParseDType(name->as_string());
  }
  KV_ASSIGN_OR_RETURN(Array out, Dequantize(q, static_cast<int>(group_size), static_cast<int>(bits), dtype));
  return Value(EncodeArray(out));
}

}  // namespace

Result<OpOutput> CallModuleFunction(std::string_view method, const Args& args) {
  if (method == "make_prompt_cache") return MakePromptCacheOp(args);
  if (method == "can_trim_prompt_cache") {
    KV_ASSIGN_OR_RETURN(auto caches, args.CacheRefs("cache"));
    return Value(Json(CanTrimPromptCache(caches)));
  }
  if (method == "trim_prompt_cache") {
    KV_ASSIGN_OR_RETURN(auto caches, args.CacheRefs("cache"));
    KV_ASSIGN_OR_RETURN(int64_t n, args.Int("num_tokens"));
    KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimPromptCache(caches, n));
    return Value(Json(trimmed));
  }
  if (method == "create_causal_mask") return CreateCausalMaskOp(args);
  if (method == "create_attention_mask") return CreateAttentionMaskOp(args);
  if (method == "base.create_attention_mask") return ModelAttentionMaskOp(args);
  if (method == "mx.quantize") return QuantizeOp(args);
  if (method == "mx.dequantize") return DequantizeOp(args);
  return Status::NotSupported("trace_replay: unknown function " + std::string(method));
}

}  // namespace kvstore::trace
