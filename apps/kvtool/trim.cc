// kvtool trim FILE -n N -o OUT: drops the last N tokens of every layer, as
// mlx-lm's trim_prompt_cache does (all layers must be trimmable); --keep N
// keeps the first N instead. The output keeps the input's layout and
// container and gets fresh digests.
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "apps/kvtool/progress.h"

namespace kvtool {
namespace {

struct TrimArgs {
  std::string in, out;
  std::optional<int64_t> n, keep;
  bool quiet = false;
  int threads = 0;
};

int RunTrim(const TrimArgs& a) {
  if (a.n.has_value() == a.keep.has_value()) return Fail(kExitUsage, "give exactly one of -n and --keep");
  if ((a.n && *a.n < 0) || (a.keep && *a.keep < 0)) return Fail(kExitUsage, "token counts must be >= 0");
  auto info = kvstore::ReadPromptCacheInfo(kvstore::Env::Default(), a.in);
  if (!info.ok()) return Fail(info.status());
  int64_t n = a.n.value_or(0);
  if (a.keep) {
    n = std::max<int64_t>(0, info->tokens().value_or(0) - *a.keep);
  }
  std::optional<int64_t> trimmed;
  kvstore::ConvertOptions c;
  c.output.layout = info->layout == kvstore::PromptCacheLayout::kMlxSwiftLm ? kvstore::PromptCacheLayout::kMlxSwiftLm
                                                                           : kvstore::PromptCacheLayout::kMlxLm;
  if (info->compression) {
    c.output.compression_level = 3;
    if (info->compression->codec == "zstd-byteplane") c.output.codec = kvstore::ZstdCodec::kBytePlane;
  }
  c.threads = a.threads;
  // Each call gets a fresh layer (views of the input), so trimming it is
  // repeatable; the save fails before touching OUT on an untrimmable layer.
  c.transform = [&](size_t i, std::shared_ptr<kvstore::Cache> layer) -> kvstore::Result<std::shared_ptr<kvstore::Cache>> {
    if (!layer->IsTrimmable()) {
      return kvstore::Status::NotSupported(std::string(layer->class_name()) + " is not trimmable");
    }
    KV_ASSIGN_OR_RETURN(int64_t t, layer->Trim(n));
    if (i == 0) trimmed = t;  // mlx-lm reports the first layer's count
    return layer;
  };
  ProgressBar bar("trim", a.quiet);
  c.output.progress = bar.Callback();
  kvstore::Status s = kvstore::ConvertPromptCacheFile(kvstore::Env::Default(), a.in, a.out, c);
  if (!s.ok()) return Fail(s);
  if (!a.quiet) {
    std::fprintf(stderr, "kvtool: trimmed %lld tokens, wrote %s\n", static_cast<long long>(trimmed.value_or(0)),
                 a.out.c_str());
  }
  return kExitOk;
}

}  // namespace

Runner RegisterTrim(CLI::App& app) {
  auto args = std::make_shared<TrimArgs>();
  CLI::App* cmd = app.add_subcommand("trim", "Drop trailing tokens from every layer");
  cmd->add_option("FILE", args->in, "input prompt-cache file")->required();
  cmd->add_option("-n", args->n, "tokens to drop from the end");
  cmd->add_option("--keep", args->keep, "tokens to keep from the start (instead of -n)");
  cmd->add_option("-o,--output", args->out, "output file (may equal FILE)")->required();
  cmd->add_option("--threads", args->threads, "worker threads (0 = all cores)");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress or summary on stderr");
  return [args, cmd] { return *cmd ? RunTrim(*args) : -1; };
}

}  // namespace kvtool
