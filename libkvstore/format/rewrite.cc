// RewritePromptCacheFile: the convert/trim operation every front-end calls.
#include "kvstore/prompt_cache_rewrite.h"

#include "kvstore/cache_convert.h"

namespace kvstore {
namespace {

Status CheckOptions(const RewriteOptions& o) {
  if (o.compress == false && (o.codec || o.level)) {
    return Status::InvalidArgument("a codec or level applies to compressed output");
  }
  if (o.trim && o.keep) return Status::InvalidArgument("give at most one of trim and keep");
  if ((o.trim && *o.trim < 0) || (o.keep && *o.keep < 0)) return Status::InvalidArgument("token counts must be >= 0");
  if (o.dequantize && o.quantize_bits != 0) return Status::InvalidArgument("quantize and dequantize exclude each other");
  if (o.quantize_bits != 0 && !IsSupportedQuantization(o.quantize_bits, o.quantize_group)) {
    return Status::InvalidArgument("quantize takes bits 2, 3, 4, 5, 6, 8 and group 32, 64, 128");
  }
  if (o.dtype && !IsCastLayerDType(*o.dtype)) return Status::InvalidArgument("dtype must be F16, BF16 or F32");
  if (o.layout == PromptCacheLayout::kMlxLmLegacy) {
    return Status::InvalidArgument("the legacy mlx-lm layout is read-only");
  }
  if (o.integrity == false && o.digest) return Status::InvalidArgument("a digest algorithm needs integrity");
  return Status::OK();
}

}  // namespace

bool ConvertsLayers(const RewriteOptions& o) { return o.dequantize || o.dtype || o.quantize_bits != 0; }

Result<std::shared_ptr<Cache>> ConvertLayer(const RewriteOptions& o, std::shared_ptr<Cache> layer) {
  if (o.dequantize) {
    KV_ASSIGN_OR_RETURN(layer, DequantizeLayer(layer));
  }
  if (o.dtype) {
    KV_ASSIGN_OR_RETURN(layer, CastLayer(layer, *o.dtype));
  }
  if (o.quantize_bits != 0) {
    KV_ASSIGN_OR_RETURN(layer, QuantizeLayer(layer, o.quantize_group, o.quantize_bits, o.rounding));
  }
  return layer;
}

Result<RewriteResult> RewritePromptCacheFile(Env* env, const std::string& in, const std::string& out,
                                             const RewriteOptions& o) {
  KV_RETURN_IF_ERROR(CheckOptions(o));
  KV_ASSIGN_OR_RETURN(PromptCacheInfo info, ReadPromptCacheInfo(env, in));
  const SavePromptCacheOptions same = SameFormatAs(info);
  RewriteResult result;
  result.layout = o.layout.value_or(same.layout);
  // Container: as asked, else the input's.
  const ZstdCodec codec = o.codec.value_or(same.codec);
  std::optional<int> level = same.compression_level;
  if (o.compress == false) level.reset();
  if (o.compress == true || o.codec || o.level) level = o.level.value_or(DefaultZstdLevel(codec));
  if (level) result.codec = codec;
  const bool trims = o.trim || o.keep;
  const bool rewrite = ConvertsLayers(o) || trims || o.integrity == true || o.digest ||
                       (o.integrity == false && info.has_digests) || result.layout != info.layout;
  if (!rewrite) {
    TranscodeOptions t;
    t.compression_level = level;
    t.codec = codec;
    t.threads = o.threads;
    t.progress = o.progress;
    t.durability = o.durability;
    KV_RETURN_IF_ERROR(TranscodePromptCacheFile(env, in, out, t));
    result.transcoded = true;
    return result;
  }
  ConvertOptions c;
  c.output.layout = result.layout;
  c.output.integrity = o.integrity.value_or(true) || o.digest.has_value();
  c.output.digest = o.digest.value_or(same.digest);
  c.output.compression_level = level;
  c.output.codec = codec;
  c.output.progress = o.progress;
  c.output.durability = o.durability;
  c.threads = o.threads;
  if (ConvertsLayers(o)) c.transform = [&o](size_t, std::shared_ptr<Cache> layer) { return ConvertLayer(o, std::move(layer)); };
  if (!trims) {
    KV_RETURN_IF_ERROR(ConvertPromptCacheFile(env, in, out, c));
    return result;
  }
  const int64_t n = o.trim ? *o.trim : std::max<int64_t>(0, info.tokens().value_or(0) - *o.keep);
  KV_ASSIGN_OR_RETURN(result.trimmed, TrimPromptCacheFile(env, in, out, n, c));
  return result;
}

}  // namespace kvstore
