// ConvertLlamaStateToPromptCache: a ggsq file -> an mlx-lm prompt cache,
// one KVCache per layer, streamed through SavePromptCache (the layers are
// built from the mapped ggsq bytes each time the writer asks for one).
#include <string>

#include "kvstore/json.h"
#include "kvstore/llama_cpp.h"
#include "libkvstore/engines/kv_layout.h"
#include "libkvstore/engines/llama_metadata.h"

namespace kvstore {
namespace {

using engines::CellBlock;

// The file's layers must have the model's layer count and row widths.
Status CheckAgainstModel(const LlamaStateStream& st, const LlamaModelInfo& m) {
  const std::string model = "the model (" + m.source + ")";
  if (st.layers.size() != static_cast<size_t>(m.n_layer)) {
    return Status::InvalidArgument("llama.cpp state: n_layer " + std::to_string(st.layers.size()) + " != " + model +
                                   " n_layer " + std::to_string(m.n_layer));
  }
  for (size_t l = 0; l < st.layers.size(); ++l) {
    const LlamaStateLayer& layer = st.layers[l];
    const std::string where = "llama.cpp state: layer " + std::to_string(l);
    if (layer.n_embd_k != m.n_embd_k()) {
      return Status::InvalidArgument(where + " K row has " + std::to_string(layer.n_embd_k) + " elements, " + model +
                                     " n_head_kv " + std::to_string(m.n_head_kv) + " x head_dim " +
                                     std::to_string(m.head_dim_k) + " = " + std::to_string(m.n_embd_k()));
    }
    if (layer.n_embd_v != m.n_embd_v()) {
      return Status::InvalidArgument(where + " V row has " + std::to_string(layer.n_embd_v) + " elements, " + model +
                                     " n_head_kv " + std::to_string(m.n_head_kv) + " x head_dim_v " +
                                     std::to_string(m.head_dim_v) + " = " + std::to_string(m.n_embd_v()));
    }
  }
  if (m.rope.key_order == KeyChannelOrder::kAdjacentPairs && m.head_dim_k % 2 != 0) {
    return Status::InvalidArgument("model: head_dim " + std::to_string(m.head_dim_k) + " is odd; RoPE pairs need it even");
  }
  return Status::OK();
}

struct LayerBuilder {
  std::span<const std::byte> bytes;
  const LlamaStateStream* stream;
  const LlamaSequence* seq;
  const LlamaModelInfo* model;
  DType dtype;

  Result<std::shared_ptr<Cache>> operator()(size_t l) const {
    const LlamaStateLayer& layer = stream->layers[l];
    const uint64_t cells = stream->cell_count();
    const DType kt = GgmlTypeToDType(layer.k_type), vt = GgmlTypeToDType(layer.v_type);
    const CellBlock k{bytes.data() + layer.k_offset, layer.n_embd_k * DTypeSize(kt), DTypeSize(kt), kt};
    const CellBlock v = stream->v_trans
                            ? CellBlock{bytes.data() + layer.v_offset, DTypeSize(vt), cells * DTypeSize(vt), vt}
                            : CellBlock{bytes.data() + layer.v_offset, layer.n_embd_v * DTypeSize(vt), DTypeSize(vt), vt};
    const bool pairs = model->rope.key_order == KeyChannelOrder::kAdjacentPairs;
    Array keys = engines::GatherHeads(k, seq->cell_of_position, model->n_head_kv, model->head_dim_k, pairs);
    Array values = engines::GatherHeads(v, seq->cell_of_position, model->n_head_kv, model->head_dim_v, false);
    KV_ASSIGN_OR_RETURN(keys, engines::CastFloat(keys, dtype));
    KV_ASSIGN_OR_RETURN(values, engines::CastFloat(values, dtype));
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> cache, CacheFromState("KVCache", CacheState{keys, values}, MetaState("")));
    return std::shared_ptr<Cache>(std::move(cache));
  }
};

}  // namespace

Result<LlamaConversionReport> ConvertLlamaStateToPromptCache(Env* env, const std::string& in, const std::string& out,
                                                             const LlamaModelInfo& model,
                                                             const LlamaToPromptCacheOptions& options) {
  // A copy, not a mapping: llama-server rewrites slot files in place.
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const ReadableFile> file, env->ReadIntoMemory(in));
  const std::span<const std::byte> bytes = file->data();
  Result<LlamaState> parsed = ParseLlamaState(bytes);
  if (!parsed.ok()) return parsed.status().WithPrefix(in);
  const LlamaState& state = *parsed;
  Result<LlamaSequence> found = FindLlamaSequence(state);
  if (!found.ok()) return found.status().WithPrefix(in);
  const LlamaSequence& seq = *found;
  const LlamaStateStream& stream = state.streams[seq.stream];
  KV_RETURN_IF_ERROR(CheckAgainstModel(stream, model).WithPrefix(in));

  LlamaConversionReport report;
  report.layers = stream.layers.size();
  report.tokens = stream.cell_count();
  report.tokens_source = options.tokens ? "option" : "file";
  const std::vector<int32_t>& tokens = options.tokens ? *options.tokens : state.tokens;
  if (tokens.size() != stream.cell_count()) {
    return Status::InvalidArgument(in + ": " + std::to_string(tokens.size()) + " tokens (" + report.tokens_source +
                                   ") but " + std::to_string(stream.cell_count()) + " cells; the counts must match");
  }
  const LlamaStateLayer& first = stream.layers[0];
  report.dtype = options.dtype.value_or(model.dtype.value_or(GgmlTypeToDType(first.k_type)));
  report.target = LlamaTarget{.k_type = first.k_type,
                              .v_type = first.v_type,
                              .flash_attn = !stream.v_trans,
                              .n_stream = static_cast<uint32_t>(state.streams.size()),
                              .stream = static_cast<uint32_t>(seq.stream),
                              .seq_id = seq.seq_id};
  const Metadata metadata = {{std::string(kLlamaCppMetadataKey), engines::LlamaTargetJson(report.target)},
                             {std::string(kTokensMetadataKey), engines::TokenListJson(tokens)}};
  const LayerBuilder build{bytes, &stream, &seq, &model, report.dtype};
  LayerSource source = [&](size_t l) -> Result<std::shared_ptr<const Cache>> {
    KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> layer, build(l));
    if (options.transform) {
      KV_ASSIGN_OR_RETURN(layer, options.transform(l, std::move(layer)));
    }
    return std::shared_ptr<const Cache>(std::move(layer));
  };
  KV_RETURN_IF_ERROR(SavePromptCache(env, out, stream.layers.size(), source, metadata, options.output));
  return report;
}

}  // namespace kvstore
