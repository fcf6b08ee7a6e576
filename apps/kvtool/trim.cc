// kvtool trim FILE -n N -o OUT: drops the last N tokens of every layer, as
// mlx-lm's trim_prompt_cache does (all layers must be trimmable); --keep N
// keeps the first N instead. The output keeps the input's layout (unless
// --to names another) and container and gets fresh digests
// (RewritePromptCacheFile).
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "apps/kvtool/progress.h"
#include "kvstore/prompt_cache_rewrite.h"

namespace kvtool {
namespace {

struct TrimArgs {
  std::string in, out;
  std::optional<int64_t> n, keep;
  std::string to;  // a layout name; empty: the input's
  bool quiet = false;
  int threads = 0;
  SyncFlags sync;
};

int RunTrim(const TrimArgs& a) {
  if (a.n.has_value() == a.keep.has_value()) return Fail(kExitUsage, "give exactly one of -n and --keep");
  if ((a.n && *a.n < 0) || (a.keep && *a.keep < 0)) return Fail(kExitUsage, "token counts must be >= 0");
  kvstore::RewriteOptions o;  // everything else as the input
  if (!a.to.empty()) {
    o.layout = kvstore::LayoutFromName(a.to);
    if (!o.layout || *o.layout == kvstore::PromptCacheLayout::kMlxLmLegacy) {
      return Fail(kExitUsage, "--to must be mlx-lm-0.32, mlx-lm-0.31, mlx-lm or mlx-swift-lm");
    }
  }
  o.trim = a.n;
  o.keep = a.keep;
  o.threads = a.threads;
  o.durability = DurabilityOf(a.sync);
  ProgressBar bar("trim", a.quiet);
  o.progress = bar.Callback();
  auto result = kvstore::RewritePromptCacheFile(kvstore::Env::Default(), a.in, a.out, o);
  bar.Done();
  if (!result.ok()) return Fail(result.status());
  const int64_t trimmed = result->trimmed.value_or(0);
  if (!a.quiet) {
    std::fprintf(stderr, "kvtool: trimmed %lld tokens, wrote %s\n", static_cast<long long>(trimmed), a.out.c_str());
  }
  return kExitOk;
}

}  // namespace

Runner RegisterTrim(CLI::App& app) {
  auto args = std::make_shared<TrimArgs>();
  CLI::App* cmd = app.add_subcommand("trim", "Drop trailing tokens from every layer");
  cmd->add_option("FILE", args->in, "input prompt-cache file")->required()->check(NonEmpty())->transform(UserPath());
  cmd->add_option("-n", args->n, "tokens to drop from the end");
  cmd->add_option("--keep", args->keep, "tokens to keep from the start (instead of -n)");
  cmd->add_option("-o,--output", args->out, "output file (may equal FILE)")
      ->required()
      ->check(NonEmpty())
      ->transform(UserPath());
  cmd->add_option("--to", args->to, "layout: mlx-lm-0.32, mlx-lm-0.31, mlx-lm or mlx-swift-lm (default: the input's)")
      ->check(NonEmpty());
  cmd->add_option("--threads", args->threads, "worker threads (0 = all cores)");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress or summary on stderr");
  AddSyncFlags(cmd, &args->sync);
  return [args, cmd] { return *cmd ? RunTrim(*args) : -1; };
}

}  // namespace kvtool
