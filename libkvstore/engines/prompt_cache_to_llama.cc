// ConvertPromptCacheToLlamaState: an mlx-lm prompt cache -> a ggsq file for
// a llama.cpp server configured as LlamaTarget says. The output is streamed
// layer by layer (all K blocks, then all V blocks, as llama.cpp orders them),
// reading each layer from the input when its block is written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kvstore/float16.h"
#include "kvstore/llama_cpp.h"
#include "libkvstore/engines/kv_layout.h"
#include "libkvstore/engines/llama_metadata.h"

namespace kvstore {
namespace {

// Why a cache class has no llama.cpp equivalent.
std::string RefusalFor(std::string_view cls) {
  if (cls == "QuantizedKVCache") return "quantized caches are not supported (kvtool convert --dequantize first)";
  if (cls == "RotatingKVCache" || cls == "BatchRotatingKVCache") return "sliding-window caches are not supported";
  if (cls == "ChunkedKVCache") return "chunked-attention caches are not supported";
  if (cls == "ArraysCache" || cls == "MambaCache") return "recurrent state is not supported";
  if (cls == "CacheList") return "hybrid layers (CacheList) are not supported";
  if (cls == "BatchKVCache") return "batch caches are not supported (a llama.cpp state file holds one sequence)";
  return "class " + std::string(cls) + " is not supported";
}

struct Dims {
  int64_t n_head, tokens, head_dim;
};

Result<Dims> CheckTensor(const Array& a, std::string_view what, int64_t head_dim, const LlamaModelInfo& m,
                         const std::string& where) {
  if (a.ndim() != 4) return Status::InvalidArgument(where + " " + std::string(what) + " has rank " + std::to_string(a.ndim()) + ", not 4");
  if (!IsFloating(a.dtype())) return Status::InvalidArgument(where + " " + std::string(what) + " dtype " + std::string(DTypeName(a.dtype())) + " is not a float type");
  if (a.dim(0) != 1) {
    return Status::NotSupported(where + " " + std::string(what) + " batch " + std::to_string(a.dim(0)) +
                                ": a llama.cpp state file holds one sequence");
  }
  const std::string model = "the model (" + m.source + ")";
  if (a.dim(1) != m.n_head_kv) {
    return Status::InvalidArgument(where + " " + std::string(what) + " n_head_kv " + std::to_string(a.dim(1)) + " != " +
                                   model + " n_head_kv " + std::to_string(m.n_head_kv));
  }
  if (a.dim(3) != head_dim) {
    return Status::InvalidArgument(where + " " + std::string(what) + " head_dim " + std::to_string(a.dim(3)) + " != " +
                                   model + " " + (what == "keys" ? "head_dim " : "head_dim_v ") + std::to_string(head_dim));
  }
  return Dims{a.dim(1), a.dim(2), a.dim(3)};
}

// `a` in the cache type, refusing finite values that F16 cannot hold.
Result<Array> ToCacheType(const Array& a, GgmlType type, const std::string& where) {
  const DType dtype = GgmlTypeToDType(type);
  if (a.dtype() == dtype) return a.Contiguous();
  if (dtype != DType::kF16) return engines::CastFloat(a, dtype);
  KV_ASSIGN_OR_RETURN(Array f32, a.AsType(DType::kF32));
  f32 = f32.Contiguous();
  const float* values = f32.data_as<float>();
  const int64_t n = f32.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float x = values[i];
    if (std::isfinite(x) && std::fabs(x) >= 65520.0f) {  // rounds to infinity in F16
      return Status::InvalidArgument(where + " holds " + std::to_string(x) +
                                     ", outside F16's range: use --kv-type bf16 (llama.cpp -ctk bf16 -ctv bf16)");
    }
  }
  return f32.AsType(DType::kF16);
}

struct Converter {
  const PromptCacheReader* reader;
  const LlamaModelInfo* model;
  LlamaTarget target;
  bool verify;
  int64_t tokens = -1;  // T, from the first layer read
  std::vector<std::byte> buffer;

  Result<KeysValues> ReadLayer(size_t l) {
    const std::string where = "layer " + std::to_string(l);
    KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> cache, reader->ReadLayer(l, verify));
    const std::string_view cls = cache->class_name();
    if (cls != "KVCache" && cls != "ConcatenateKVCache") return Status::NotSupported(where + ": " + RefusalFor(cls));
    KV_ASSIGN_OR_RETURN(CacheState state, cache->State());
    if (state.size() != 2 || !state[0].is_array() || !state[1].is_array()) {
      return Status::InvalidArgument(where + ": state is not [keys, values]");
    }
    KeysValues kv{state[0].array(), state[1].array()};
    KV_ASSIGN_OR_RETURN(Dims k, CheckTensor(kv.keys, "keys", model->head_dim_k, *model, where));
    KV_ASSIGN_OR_RETURN(Dims v, CheckTensor(kv.values, "values", model->head_dim_v, *model, where));
    if (k.tokens != v.tokens) return Status::InvalidArgument(where + ": keys and values hold different token counts");
    if (tokens < 0) tokens = k.tokens;
    if (k.tokens != tokens) {
      return Status::InvalidArgument(where + " holds " + std::to_string(k.tokens) + " tokens, layer 0 " +
                                     std::to_string(tokens) + ": the layers must agree");
    }
    return kv;
  }

  Result<std::span<const std::byte>> Block(size_t l, bool value) {
    KV_ASSIGN_OR_RETURN(KeysValues kv, ReadLayer(l));
    const std::string where = "layer " + std::to_string(l) + (value ? " values" : " keys");
    KV_ASSIGN_OR_RETURN(Array a, ToCacheType(value ? kv.values : kv.keys, value ? target.v_type : target.k_type, where));
    const bool pairs = !value && model->rope.key_order == KeyChannelOrder::kAdjacentPairs;
    buffer.clear();
    engines::ScatterHeads(a, pairs, value && !target.flash_attn, buffer);
    return std::span<const std::byte>(buffer);
  }
};

// Fills `options`' unset fields from the input's metadata and the defaults.
Result<LlamaTarget> ResolveTarget(PromptCacheToLlamaOptions options, const PromptCacheInfo& info) {
  LlamaTarget t;
  std::optional<int32_t> seq_id;
  for (const auto& [key, value] : info.user_metadata) {
    if (key == kLlamaCppMetadataKey) {
      KV_ASSIGN_OR_RETURN(seq_id, engines::ApplyLlamaTargetJson(value, options));
    }
  }
  t.k_type = options.k_type.value_or(t.k_type);
  t.v_type = options.v_type.value_or(t.v_type);
  t.flash_attn = options.flash_attn.value_or(t.flash_attn);
  t.n_stream = options.n_stream.value_or(t.n_stream);
  t.stream = options.stream.value_or(t.stream);
  if (t.n_stream == 0 || t.n_stream > kLlamaStateMaxStreams) {
    return Status::InvalidArgument("n_stream " + std::to_string(t.n_stream) + " is not in 1.." + std::to_string(kLlamaStateMaxStreams));
  }
  if (t.stream >= t.n_stream) {
    return Status::InvalidArgument("stream " + std::to_string(t.stream) + " is not below n_stream " + std::to_string(t.n_stream));
  }
  // With one stream per slot, llama.cpp keeps sequence s in stream s.
  t.seq_id = t.n_stream > 1 ? static_cast<int32_t>(t.stream) : seq_id.value_or(0);
  return t;
}

}  // namespace

Result<LlamaConversionReport> ConvertPromptCacheToLlamaState(Env* env, const std::string& in, const std::string& out,
                                                             const LlamaModelInfo& model,
                                                             const PromptCacheToLlamaOptions& options) {
  PromptCacheReader::Options open;
  open.prefetch = true;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(env, in, open));
  const PromptCacheInfo& info = reader->info();
  if (!info.unsupported.empty()) return Status::NotSupported(in + ": " + info.unsupported);
  if (reader->num_layers() != static_cast<size_t>(model.n_layer)) {
    return Status::InvalidArgument(in + ": " + std::to_string(reader->num_layers()) + " layers != the model (" +
                                   model.source + ") n_layer " + std::to_string(model.n_layer));
  }
  LlamaConversionReport report;
  KV_ASSIGN_OR_RETURN(report.target, ResolveTarget(options, info));
  std::vector<int32_t> tokens;
  const auto md = std::find_if(info.user_metadata.begin(), info.user_metadata.end(),
                               [](const auto& kv) { return kv.first == kTokensMetadataKey; });
  if (options.tokens) {
    tokens = *options.tokens;
    report.tokens_source = "option";
  } else if (md != info.user_metadata.end()) {
    Result<std::vector<int32_t>> parsed = ParseTokenList(md->second);
    if (!parsed.ok()) return parsed.status().WithPrefix(in + ": metadata");
    tokens = std::move(*parsed);
    report.tokens_source = "metadata";
  } else {
    return Status::InvalidArgument(in + ": no token ids: the file has no \"tokens\" metadata; pass them (--tokens FILE)");
  }

  Converter conv{reader.get(), &model, report.target, options.verify_input && info.has_digests, -1, {}};
  KV_ASSIGN_OR_RETURN(KeysValues first, conv.ReadLayer(0));
  report.dtype = first.keys.dtype();
  report.layers = reader->num_layers();
  report.tokens = static_cast<size_t>(conv.tokens);
  if (tokens.size() != report.tokens) {
    return Status::InvalidArgument(in + ": " + std::to_string(tokens.size()) + " tokens (" + report.tokens_source +
                                   ") but the cache holds " + std::to_string(report.tokens) + "; the counts must match");
  }
  if (report.tokens == 0) return Status::InvalidArgument(in + ": the cache holds no tokens");

  LlamaState state;
  state.tokens = std::move(tokens);
  state.streams.resize(report.target.n_stream);
  LlamaStateStream& st = state.streams[report.target.stream];
  st.positions.resize(report.tokens);
  for (size_t t = 0; t < report.tokens; ++t) st.positions[t] = static_cast<int32_t>(t);
  st.seq_ids.assign(report.tokens, report.target.seq_id);
  st.v_trans = !report.target.flash_attn;
  st.layers.assign(report.layers, LlamaStateLayer{.k_type = report.target.k_type,
                                                  .v_type = report.target.v_type,
                                                  .n_embd_k = static_cast<uint32_t>(model.n_embd_k()),
                                                  .n_embd_v = static_cast<uint32_t>(model.n_embd_v())});
  // Errors reading a block are the input's; the writer's own name OUT.
  auto block = [&](size_t, size_t l, bool value) -> Result<std::span<const std::byte>> {
    Result<std::span<const std::byte>> b = conv.Block(l, value);
    if (!b.ok()) return b.status().WithPrefix(in);
    return b;
  };
  KV_RETURN_IF_ERROR(SaveLlamaState(env, out, state, block));
  return report;
}

}  // namespace kvstore
