// One operation behind `kvtool convert`/`kvtool trim` and Python's
// kvstore.convert/kvstore.trim: re-write a prompt-cache file with another
// layout, container, integrity, per-layer conversion or token count. Every
// unset field means "as the input"; front-ends only parse their flags into
// RewriteOptions.
//
// Thread safety: reentrant.
#ifndef KVSTORE_PROMPT_CACHE_REWRITE_H_
#define KVSTORE_PROMPT_CACHE_REWRITE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kvstore/prompt_cache_file.h"
#include "kvstore/quantize.h"

namespace kvstore {

struct RewriteOptions {
  // The output's mlx-lm (or mlx-swift-lm) layout; unset: the input's (the
  // read-only legacy layout becomes kMlxLm).
  std::optional<PromptCacheLayout> layout;
  // Digests. Unset: a file re-written for another reason gets digests in the
  // input's algorithm (SHA-256 when it has none), and a container change
  // keeps the bytes as they are. true: re-write with digests in `digest`
  // (else the input's algorithm); false: re-write without digests.
  std::optional<bool> integrity;
  std::optional<DigestAlgorithm> digest;  // implies integrity
  // Container. Unset: the input's (a compressed input's codec at its
  // default level). false: a plain file; true: compressed with `codec` at
  // `level` (defaults: the input's codec, DefaultZstdLevel). A codec or a
  // level alone implies true.
  std::optional<bool> compress;
  std::optional<ZstdCodec> codec;
  std::optional<int> level;
  // Per-layer conversions, applied in this order (cache_convert.h).
  bool dequantize = false;
  std::optional<DType> dtype;             // CastLayer
  int quantize_bits = 0;                  // 0: none; QuantizeLayer
  int quantize_group = 64;
  QuantizeOptions::Rounding rounding = QuantizeOptions::Rounding::kCpu;
  // mlx-lm's trim_prompt_cache, before the conversions: drop the last
  // `trim` tokens, or keep the first `keep` (at most one of them).
  std::optional<int64_t> trim;
  std::optional<int64_t> keep;
  int threads = 0;
  ProgressFn progress;
  // Synced only over an existing file by default (kvstore/env.h): a new
  // output costs what cp's does, a replaced one survives a power loss.
  Durability durability = Durability::kWhenReplacing;
};

struct RewriteResult {
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm;  // of the output
  std::optional<ZstdCodec> codec;    // set when the output is compressed
  bool transcoded = false;           // only the container changed, bytes copied
  std::optional<int64_t> trimmed;    // tokens trimmed (of the first layer), when asked
};

// The per-layer conversions of `options` (dequantize, cast, quantize) of
// one layer; the layer itself when none applies. Also what the llama.cpp
// conversions apply.
Result<std::shared_ptr<Cache>> ConvertLayer(const RewriteOptions& options, std::shared_ptr<Cache> layer);
// True when `options` asks for a per-layer conversion.
bool ConvertsLayers(const RewriteOptions& options);

// Re-writes `in` as `out` (which may equal `in`; replaced atomically). When
// only the container changes the plain file is copied byte for byte
// (TranscodePromptCacheFile); anything else goes layer by layer
// (ConvertPromptCacheFile, checking the input's digests). Errors:
// InvalidArgument for contradicting options (compress false with a codec or
// level, trim with keep, negative counts, quantize with dequantize,
// unsupported quantization or dtype) before anything is read; then those of
// the functions above; NotSupported for a layer that cannot be trimmed.
Result<RewriteResult> RewritePromptCacheFile(Env* env, const std::string& in, const std::string& out,
                                             const RewriteOptions& options);

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_REWRITE_H_
