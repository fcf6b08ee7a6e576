// kvtool convert between llama.cpp sequence-state files and prompt-cache
// files: a ggsq IN becomes an mlx-lm (or mlx-swift-lm) file; --to llama.cpp
// goes the other way. --model describes the model; the llama.cpp flags
// describe the server that will load the output.
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "apps/kvtool/llama.h"
#include "apps/kvtool/progress.h"
#include "kvstore/llama_cpp.h"

namespace kvtool {
namespace {

using kvstore::LlamaConversionReport;

std::string TypeName(kvstore::GgmlType t) { return kvstore::GgmlTypeName(static_cast<int32_t>(t)); }

std::string TargetText(const kvstore::LlamaTarget& t) {
  std::string types = TypeName(t.k_type) + (t.v_type == t.k_type ? "" : "/" + TypeName(t.v_type));
  std::string out = types + ", flash-attn " + (t.flash_attn ? "on" : "off");
  if (t.n_stream > 1) out += ", stream " + std::to_string(t.stream) + " of " + std::to_string(t.n_stream);
  return out;
}

// How K's channels were mapped, e.g. "K pairs (2i, 2i+1) -> (i, i+D/2): llama, norm RoPE".
std::string KeyText(const kvstore::LlamaModelInfo& m) {
  const bool pairs = m.rope.key_order == kvstore::KeyChannelOrder::kAdjacentPairs;
  return std::string(pairs ? "K pairs (2i, 2i+1) <-> (i, i+D/2)" : "K channels unchanged") + ": " + m.architecture +
         ", " + std::string(m.rope.rope_style) + " RoPE";
}

void Summary(const LlamaConvertRequest& r, const std::string& what) {
  if (r.quiet) return;
  auto size = kvstore::Env::Default()->GetFileSize(r.out);
  std::fprintf(stderr, "kvtool: wrote %s (%s, %s)\n", r.out.c_str(), size.ok() ? HumanBytes(*size).c_str() : "?",
               what.c_str());
}

// ggsq -> prompt cache.
int ToPromptCache(const LlamaConvertRequest& r, const LlamaConvertArgs& l, const kvstore::LlamaModelInfo& model,
                  std::optional<std::vector<int32_t>> tokens) {
  if (r.to == "llama.cpp") {
    return Fail(kExitUnsupported, r.in + " is already a llama.cpp state file (convert it to mlx-lm and back to change "
                                         "its llama.cpp settings)");
  }
  if (l.any()) return Fail(kExitUsage, "--kv-type, --flash-attn, --n-stream and --stream apply to --to llama.cpp");
  kvstore::LlamaToPromptCacheOptions o;
  o.output.layout = r.to == "mlx-swift-lm" ? kvstore::PromptCacheLayout::kMlxSwiftLm : kvstore::PromptCacheLayout::kMlxLm;
  o.output.integrity = r.integrity;
  o.output.digest = r.digest;
  o.output.compression_level = r.compression_level;
  o.output.codec = r.codec;
  o.output.threads = r.threads;
  o.output.durability = r.durability;
  o.dtype = r.dtype;
  o.tokens = std::move(tokens);
  if (r.transform) o.transform = [&](size_t, std::shared_ptr<kvstore::Cache> layer) { return r.transform(std::move(layer)); };
  kvstore::Result<LlamaConversionReport> report = kvstore::Status::Internal("not run");
  {
    ProgressBar bar("convert", r.quiet);  // cleared before the summary
    o.output.progress = bar.Callback();
    report = kvstore::ConvertLlamaStateToPromptCache(kvstore::Env::Default(), r.in, r.out, model, o);
  }
  if (!report.ok()) return Fail(report.status());
  if (!r.quiet && r.quantize_bits != 0) {
    std::fprintf(stderr, "kvtool: note: quantizing to %d bits loses precision\n", r.quantize_bits);
  }
  const kvstore::DType from = kvstore::GgmlTypeToDType(report->target.k_type);
  if (!r.quiet && report->dtype != from && report->dtype != kvstore::DType::kF32) {
    std::fprintf(stderr, "kvtool: note: converting %s to %s may round values\n", TypeName(report->target.k_type).c_str(),
                 std::string(kvstore::DTypeName(report->dtype)).c_str());
  }
  const std::string container =
      r.compression_level ? ", " + std::string(kvstore::ZstdCodecName(r.codec)) : std::string();
  Summary(r, std::string(kvstore::LayoutName(o.output.layout)) + container + ", " + std::to_string(report->layers) +
                 " layers, " +
                 std::to_string(report->tokens) + " tokens, " + std::string(kvstore::DTypeName(report->dtype)) +
                 " from llama.cpp " + TargetText(report->target) + ", " + KeyText(model));
  return kExitOk;
}

// prompt cache -> ggsq.
int ToLlamaState(const LlamaConvertRequest& r, const LlamaConvertArgs& l, const kvstore::LlamaModelInfo& model,
                 std::optional<std::vector<int32_t>> tokens) {
  if (r.quantize_bits != 0 || r.dequantize || r.dtype) return Fail(kExitUsage, "--quantize, --dequantize and --dtype do not apply to --to llama.cpp (use --kv-type)");
  if (r.container_flags || r.integrity_flags) {
    return Fail(kExitUsage, "--compress, --decompress, --codec and --integrity do not apply to --to llama.cpp");
  }
  kvstore::PromptCacheToLlamaOptions o;
  if (!l.kv_type.empty()) {
    auto t = kvstore::ParseGgmlType(l.kv_type);
    if (!t) return Fail(kExitUsage, "--kv-type must be f16, bf16 or f32 (quantized llama.cpp caches are not supported)");
    o.k_type = o.v_type = *t;
  }
  if (!l.flash_attn.empty()) {
    if (l.flash_attn != "on" && l.flash_attn != "off") return Fail(kExitUsage, "--flash-attn must be on or off");
    o.flash_attn = l.flash_attn == "on";
  }
  o.n_stream = l.n_stream;
  o.stream = l.stream;
  if (l.stream && !l.n_stream) return Fail(kExitUsage, "--stream needs --n-stream (the server's -np)");
  o.tokens = std::move(tokens);
  auto report = kvstore::ConvertPromptCacheToLlamaState(kvstore::Env::Default(), r.in, r.out, model, o);
  if (!report.ok()) return Fail(report.status());
  const kvstore::DType to = kvstore::GgmlTypeToDType(report->target.k_type);
  if (!r.quiet && report->dtype != to && to != kvstore::DType::kF32) {
    std::fprintf(stderr, "kvtool: note: converting %s to %s may round values\n",
                 std::string(kvstore::DTypeName(report->dtype)).c_str(), TypeName(report->target.k_type).c_str());
  }
  Summary(r, "llama.cpp ggsq v2, " + TargetText(report->target) + ", " + std::to_string(report->layers) + " layers, " +
                 std::to_string(report->tokens) + " tokens (" + report->tokens_source + "), " + KeyText(model));
  return kExitOk;
}

}  // namespace

std::shared_ptr<LlamaConvertArgs> AddLlamaConvertOptions(CLI::App* cmd) {
  auto a = std::make_shared<LlamaConvertArgs>();
  cmd->add_option("--model", a->model, "llama.cpp conversions: the model's config.json (or folder) or GGUF")
      ->check(NonEmpty())
      ->transform(UserPath());
  cmd->add_option("--tokens", a->tokens, "llama.cpp conversions: the prompt's token ids (a JSON list file)")
      ->check(NonEmpty())
      ->transform(UserPath());
  cmd->add_option("--kv-type", a->kv_type, "--to llama.cpp: cache type f16 (default), bf16 or f32")->check(NonEmpty());
  cmd->add_option("--flash-attn", a->flash_attn, "--to llama.cpp: on (default; V rows) or off (V transposed)")
      ->check(NonEmpty());
  cmd->add_option("--n-stream", a->n_stream, "--to llama.cpp: streams of the server (-np N without --kv-unified)");
  cmd->add_option("--stream", a->stream, "--to llama.cpp: the slot's stream (default 0)");
  return a;
}

std::optional<int> MaybeRunLlamaConvert(const LlamaConvertRequest& r, const LlamaConvertArgs& l) {
  const bool llama_in = IsLlamaStateFile(r.in);
  if (!llama_in && r.to != "llama.cpp") {
    if (l.any() || !l.model.empty() || !l.tokens.empty()) {
      // An input that is neither kind of file is the problem to report (a
      // missing, empty or corrupt IN), not the flags.
      if (auto info = kvstore::ReadPromptCacheInfo(kvstore::Env::Default(), r.in); !info.ok()) {
        return Fail(info.status());
      }
      return Fail(kExitUsage, "--model, --tokens and the llama.cpp flags apply to llama.cpp conversions only");
    }
    return std::nullopt;
  }
  if (l.model.empty()) {
    return Fail(kExitUsage, "converting between llama.cpp and mlx-lm needs --model (the model's config.json, its "
                            "folder, or its GGUF): neither file says which model it belongs to");
  }
  auto model = kvstore::ReadLlamaModel(kvstore::Env::Default(), l.model);
  if (!model.ok()) return Fail(model.status());
  std::optional<std::vector<int32_t>> tokens;
  if (!l.tokens.empty()) {
    auto file = kvstore::Env::Default()->OpenReadable(l.tokens);
    if (!file.ok()) return Fail(file.status());
    auto parsed = kvstore::ParseTokenList(
        std::string_view(reinterpret_cast<const char*>((*file)->data().data()), (*file)->size()));
    if (!parsed.ok()) return Fail(parsed.status().WithPrefix(l.tokens));
    tokens = std::move(*parsed);
  }
  return llama_in ? ToPromptCache(r, l, *model, std::move(tokens)) : ToLlamaState(r, l, *model, std::move(tokens));
}

}  // namespace kvtool
