// Converting a conversation's KV cache between llama.cpp and mlx-lm
// (docs/llama-cpp.md).
//
// llama.cpp side: a sequence-state file (llama_state.h), as libllama's
// llama_state_seq_save_file and llama-server's slot save write it. mlx-lm
// side: a prompt-cache file (prompt_cache_file.h) with one KVCache per layer,
// written through SavePromptCache, so integrity, compression and the
// mlx-swift-lm layout apply to it as to every other prompt-cache file.
//
// The mapping, per layer and KV head h (D = head dim, t = position):
//   mlx keys[0, h, t, c]   = llama K row of the cell at position t, element
//                            h*D + c, with c's channel permuted when the
//                            model's KeyChannelOrder is kAdjacentPairs:
//                            mlx channel s*D/2 + i <-> llama channel 2i + s;
//   mlx values[0, h, t, c] = llama V row element h*D + c (never permuted; a
//                            transposed V stores it at [h*D + c][cell]).
// Both engines cache keys after RoPE and without the 1/sqrt(D) scale.
//
// Refused with NotSupported naming the reason: cells that are not positions
// 0..T-1 of one sequence (gaps, a shifted context, several sequences in one
// stream), quantized caches, sliding-window, chunked, hybrid or recurrent
// layers, latent (MLA) caches, and shapes that disagree with the model
// (InvalidArgument naming the field). A failed conversion leaves the output
// path untouched (the write is atomic).
//
// Thread safety: reentrant; different conversions run concurrently.
#ifndef KVSTORE_LLAMA_CPP_H_
#define KVSTORE_LLAMA_CPP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/llama_model.h"
#include "kvstore/llama_state.h"
#include "kvstore/prompt_cache_file.h"

namespace kvstore {

// User metadata keys of the prompt-cache side: the prompt's token ids as a
// JSON list (what mlx-lm's servers store), and the llama.cpp settings the
// cache came from, so that converting back needs no flags.
inline constexpr std::string_view kTokensMetadataKey = "tokens";
inline constexpr std::string_view kLlamaCppMetadataKey = "llama_cpp";

// The cells of a state as one sequence holding positions 0..T-1.
struct LlamaSequence {
  size_t stream = 0;
  int32_t seq_id = 0;
  std::vector<uint32_t> cell_of_position;  // T entries: the cell index holding each position
};

// NotSupported with the reason when the cells are not positions 0..T-1 of
// one sequence in one stream (sorted if needed): no cells at all, cells in
// several streams, several sequence ids in the stream, a position held
// twice, positions that do not start at 0 (a shifted context), or a gap.
Result<LlamaSequence> FindLlamaSequence(const LlamaState& state);

// How a llama.cpp server is configured; a state file must match it exactly.
struct LlamaTarget {
  GgmlType k_type = GgmlType::kF16;  // --cache-type-k
  GgmlType v_type = GgmlType::kF16;  // --cache-type-v
  bool flash_attn = true;            // -fa on: V rows as K's; off: V transposed
  uint32_t n_stream = 1;             // -np N without --kv-unified: N streams
  uint32_t stream = 0;               // the slot's stream
  int32_t seq_id = 0;                // the slot's sequence id
};

struct LlamaConversionReport {
  size_t layers = 0;
  size_t tokens = 0;  // T: cells, positions and tokens
  DType dtype = DType::kF16;  // of the prompt cache (read or written)
  LlamaTarget target;  // of the llama.cpp state (read or written)
  std::string tokens_source;  // "file", "metadata", "option"
};

struct LlamaToPromptCacheOptions {
  SavePromptCacheOptions output;  // layout, digests, compression of the prompt cache
  // The cache dtype; default: the model's (LlamaModelInfo::dtype), else the
  // llama.cpp cache's own type. F16 -> F32/BF16 is a cast; nothing is lost
  // except going to BF16.
  std::optional<DType> dtype;
  // Replaces the token ids of the file; the count must equal the cells.
  std::optional<std::vector<int32_t>> tokens;
  // Applied to each KVCache layer before it is written (e.g. quantize);
  // called again when the writer needs the layer again: deterministic.
  std::function<Result<std::shared_ptr<Cache>>(size_t index, std::shared_ptr<Cache> layer)> transform;
};

// Reads the ggsq file `in` and writes the prompt-cache file `out`: one
// KVCache per layer, user metadata "tokens" and "llama_cpp". Errors: those
// of ParseLlamaState and FindLlamaSequence; InvalidArgument naming the field
// when the file's layers disagree with `model` (layer count, row sizes) or
// the token count differs from the cells; the writer's errors.
Result<LlamaConversionReport> ConvertLlamaStateToPromptCache(Env* env, const std::string& in,
                                                             const std::string& out, const LlamaModelInfo& model,
                                                             const LlamaToPromptCacheOptions& options = {});

struct PromptCacheToLlamaOptions {
  // Unset fields come from the input's "llama_cpp" metadata, else from
  // LlamaTarget's defaults (f16, flash attention on, one stream).
  std::optional<GgmlType> k_type, v_type;
  std::optional<bool> flash_attn;
  std::optional<uint32_t> n_stream, stream;
  // Default: the input's "tokens" metadata (a JSON list of ints).
  std::optional<std::vector<int32_t>> tokens;
  bool verify_input = true;  // check the input's digests when it has them
};

// Reads the prompt-cache file `in` (any layout or container kvstore reads)
// and writes the ggsq file `out`. Every layer must be a KVCache (or
// ConcatenateKVCache) with batch 1, n_head_kv and head dims of `model`, and
// the same offset T. InvalidArgument for a value outside F16's range when
// writing F16 (the message suggests bf16), for a stream not below n_stream,
// and for missing tokens or a count that is not T.
Result<LlamaConversionReport> ConvertPromptCacheToLlamaState(Env* env, const std::string& in,
                                                             const std::string& out, const LlamaModelInfo& model,
                                                             const PromptCacheToLlamaOptions& options = {});

// Parses a JSON list of token ids (a --tokens file, or the "tokens"
// metadata). InvalidArgument naming the problem.
Result<std::vector<int32_t>> ParseTokenList(std::string_view json_text);

}  // namespace kvstore

#endif  // KVSTORE_LLAMA_CPP_H_
