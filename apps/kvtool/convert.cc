// kvtool convert IN -o OUT: container, layout, integrity and per-layer
// conversions of a cache file.
//
// --compress / --decompress / --codec alone change only the container: the
// plain file inside is copied byte for byte (TranscodePromptCacheFile), so
// `convert --compress` then `--decompress` gives back the input. Anything
// that changes the content (--to, --integrity, --no-integrity on a file with
// digests, --quantize, --dequantize, --dtype) re-writes the cache layer by
// layer (ConvertPromptCacheFile), checking the input's digests on the way.
// The output keeps the input's layout, mlx-lm version included, unless --to
// names another.
#include <charconv>
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "apps/kvtool/llama.h"
#include "apps/kvtool/progress.h"
#include "kvstore/cache_convert.h"
#include "kvstore/prompt_cache_rewrite.h"

namespace kvtool {
namespace {

struct ConvertArgs {
  std::string in, out, to;
  std::string quantize;  // BITS[:GROUP]
  bool dequantize = false;
  bool gpu_rounding = false;
  std::string dtype;     // f16 | bf16 | f32 (kvstore::ParseDTypeAlias)
  std::string compress_text;  // --compress: "" absent, "true" without a level, else the level
  std::optional<int> compress;
  bool compress_flag = false;
  bool decompress = false;
  std::string codec;     // zstd | byteplane (kvstore::ParseZstdCodec)
  std::string integrity_text;  // --integrity: "" absent, "true" without a name, else the algorithm
  bool integrity = false;
  std::optional<kvstore::DigestAlgorithm> digest;  // named by --integrity=ALG
  bool no_integrity = false;
  bool quiet = false;
  int threads = 0;
  SyncFlags sync;
  std::shared_ptr<LlamaConvertArgs> llama;
};

// Parses the conversion flags into `o`; an error message for a usage error.
std::optional<std::string> ParseTransform(const ConvertArgs& a, kvstore::RewriteOptions& o) {
  if (!a.dtype.empty()) {
    o.dtype = kvstore::ParseDTypeAlias(a.dtype);
    if (!o.dtype || !kvstore::IsCastLayerDType(*o.dtype)) return "--dtype must be f16, bf16 or f32";
  }
  if (!a.quantize.empty()) {
    if (std::sscanf(a.quantize.c_str(), "%d:%d", &o.quantize_bits, &o.quantize_group) < 1 ||
        !kvstore::IsSupportedQuantization(o.quantize_bits, o.quantize_group)) {
      return "--quantize takes BITS[:GROUP] with bits 2,3,4,5,6,8 and group 32,64,128";
    }
  }
  if (a.dequantize && !a.quantize.empty()) return "--quantize and --dequantize exclude each other";
  o.dequantize = a.dequantize;
  if (a.gpu_rounding) o.rounding = kvstore::QuantizeOptions::Rounding::kGpu;
  return std::nullopt;
}

// The flags a llama.cpp conversion uses (apps/kvtool/convert_llama.cc).
LlamaConvertRequest LlamaRequest(const ConvertArgs& a, std::optional<kvstore::ZstdCodec> codec,
                                 const kvstore::RewriteOptions& t) {
  LlamaConvertRequest r;
  r.in = a.in;
  r.out = a.out;
  r.to = a.to;
  r.dtype = t.dtype;
  r.quantize_bits = t.quantize_bits;
  r.dequantize = t.dequantize;
  r.durability = t.durability;
  if (kvstore::ConvertsLayers(t)) {
    r.transform = [t](std::shared_ptr<kvstore::Cache> layer) { return kvstore::ConvertLayer(t, std::move(layer)); };
  }
  r.container_flags = a.compress_flag || a.decompress || !a.codec.empty();
  r.codec = codec.value_or(kvstore::ZstdCodec::kZstd);
  if (a.compress_flag || codec) r.compression_level = a.compress.value_or(kvstore::DefaultZstdLevel(r.codec));
  r.integrity = !a.no_integrity;
  r.integrity_flags = a.integrity || a.no_integrity;
  r.digest = a.digest.value_or(kvstore::DigestAlgorithm::kSha256);
  r.threads = a.threads;
  r.quiet = a.quiet;
  return r;
}

// --compress[=LEVEL] into compress_flag and compress; an error message.
std::optional<std::string> ParseCompress(ConvertArgs& a) {
  a.compress_flag = !a.compress_text.empty();
  if (!a.compress_flag || a.compress_text == "true") return std::nullopt;
  int level = 0;
  const char* end = a.compress_text.data() + a.compress_text.size();
  auto [p, ec] = std::from_chars(a.compress_text.data(), end, level);
  if (ec != std::errc() || p != end) {
    return "--compress=" + a.compress_text + ": the level must be a number (--compress[=LEVEL], e.g. --compress=19)";
  }
  a.compress = level;
  return std::nullopt;
}

// --integrity[=sha256|xxh3] into integrity and digest; an error message.
std::optional<std::string> ParseIntegrity(ConvertArgs& a) {
  a.integrity = !a.integrity_text.empty();
  if (!a.integrity || a.integrity_text == "true") return std::nullopt;
  a.digest = kvstore::DigestAlgorithmFromName(a.integrity_text);
  if (!a.digest) return "--integrity=" + a.integrity_text + ": the digest must be sha256 or xxh3 (--integrity[=ALG])";
  return std::nullopt;
}

int RunConvert(ConvertArgs a) {
  if (std::optional<std::string> bad = ParseCompress(a)) return Fail(kExitUsage, *bad);
  if (std::optional<std::string> bad = ParseIntegrity(a)) return Fail(kExitUsage, *bad);
  if (a.compress_flag && a.decompress) {
    return Fail(kExitUsage, "--compress and --decompress exclude each other");
  }
  if (a.integrity && a.no_integrity) return Fail(kExitUsage, "--integrity and --no-integrity exclude each other");
  const std::optional<kvstore::PromptCacheLayout> to = kvstore::LayoutFromName(a.to);
  if (!a.to.empty() && a.to != "llama.cpp" && (!to || *to == kvstore::PromptCacheLayout::kMlxLmLegacy)) {
    return Fail(kExitUsage, "--to must be mlx-lm-0.32, mlx-lm-0.31, mlx-lm, mlx-swift-lm or llama.cpp");
  }
  std::optional<kvstore::ZstdCodec> asked_codec;
  if (!a.codec.empty()) {
    asked_codec = kvstore::ParseZstdCodec(a.codec);
    if (!asked_codec) return Fail(kExitUsage, "--codec must be zstd or byteplane");
  }
  if (!a.codec.empty() && a.decompress) return Fail(kExitUsage, "--codec applies to compressed output");
  kvstore::RewriteOptions o;
  if (std::optional<std::string> bad = ParseTransform(a, o)) return Fail(kExitUsage, *bad);
  o.durability = DurabilityOf(a.sync);
  if (std::optional<int> code = MaybeRunLlamaConvert(LlamaRequest(a, asked_codec, o), *a.llama)) {
    return *code;
  }
  // Everything unset is as the input (the library decides).
  if (to) o.layout = *to;
  if (a.integrity) o.integrity = true;
  if (a.no_integrity) o.integrity = false;
  o.digest = a.digest;
  if (a.decompress) o.compress = false;
  if (a.compress_flag) o.compress = true;
  o.level = a.compress;
  o.codec = asked_codec;
  o.threads = a.threads;
  if (!a.quiet && o.quantize_bits != 0) {
    std::fprintf(stderr, "kvtool: note: quantizing to %d bits loses precision\n", o.quantize_bits);
  }
  if (!a.quiet && o.dtype && *o.dtype != kvstore::DType::kF32) {
    std::fprintf(stderr, "kvtool: note: converting to %s may round values\n", a.dtype.c_str());
  }
  ProgressBar bar("convert", a.quiet);
  o.progress = bar.Callback();
  auto result = kvstore::RewritePromptCacheFile(kvstore::Env::Default(), a.in, a.out, o);
  bar.Done();
  if (!result.ok()) return Fail(result.status());
  if (!a.quiet) {
    auto out = kvstore::Env::Default()->GetFileSize(a.out);
    std::fprintf(stderr, "kvtool: wrote %s (%s, %s%s)\n", a.out.c_str(), out.ok() ? HumanBytes(*out).c_str() : "?",
                 std::string(kvstore::LayoutName(result->layout)).c_str(),
                 result->codec ? (", " + std::string(kvstore::ZstdCodecName(*result->codec))).c_str() : "");
  }
  return kExitOk;
}

}  // namespace

Runner RegisterConvert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Compress, decompress, re-lay-out or convert a cache file");
  cmd->add_option("IN", args->in, "input prompt-cache file or llama.cpp state file")
      ->required()
      ->check(NonEmpty())
      ->transform(UserPath());
  cmd->add_option("-o,--output", args->out, "output file (may equal IN)")
      ->required()
      ->check(NonEmpty())
      ->transform(UserPath());
  // A flag: the level is attached (--compress=19), so `--compress IN` keeps IN.
  cmd->add_flag("--compress", args->compress_text, "zstd container, at LEVEL (default 3; byteplane: 1)")
      ->option_text("[=LEVEL]");
  cmd->add_flag("--decompress", args->decompress, "write a plain safetensors file");
  cmd->add_option("--codec", args->codec, "compressed container: zstd (default; zstd -d compatible) or byteplane")
      ->check(NonEmpty());
  // A flag, like --compress: the algorithm is attached (--integrity=xxh3).
  cmd->add_flag("--integrity", args->integrity_text,
                "re-write with digests: sha256 (default) or xxh3 (XXH3-128, at memory speed); "
                "without it a file keeps its input's")
      ->option_text("[=sha256|xxh3]");
  cmd->add_flag("--no-integrity", args->no_integrity, "re-write without digests");
  cmd->add_option("--to", args->to,
                  "layout: mlx-lm-0.32 (mlx-lm >= 0.32), mlx-lm-0.31 (<= 0.31), mlx-lm (between the two: "
                  "ArraysCache padding), mlx-swift-lm or llama.cpp (default: the input's; mlx-lm for llama.cpp input)")
      ->check(NonEmpty());
  cmd->add_option("--quantize", args->quantize, "KVCache layers -> QuantizedKVCache, BITS[:GROUP] (mlx-lm to_quantized)")
      ->check(NonEmpty());
  cmd->add_flag("--gpu-rounding", args->gpu_rounding, "quantize with the Metal/CUDA rounding rule");
  cmd->add_flag("--dequantize", args->dequantize, "QuantizedKVCache layers -> KVCache");
  cmd->add_option("--dtype", args->dtype, "convert float tensors to f16, bf16 or f32")->check(NonEmpty());
  cmd->add_option("--threads", args->threads, "worker threads (0 = all cores)");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress or summary on stderr");
  AddSyncFlags(cmd, &args->sync);
  args->llama = AddLlamaConvertOptions(cmd);
  return [args, cmd] { return *cmd ? RunConvert(*args) : -1; };
}

}  // namespace kvtool
