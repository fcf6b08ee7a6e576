// kvtool trim FILE -n N -o OUT: drops the last N tokens of every layer, as
// mlx-lm's trim_prompt_cache does (all layers must be trimmable).
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "kvstore/prompt_cache.h"

namespace kvtool {
namespace {

struct TrimArgs {
  std::string in, out;
  std::optional<int64_t> n, keep;
  bool quiet = false;
};

int RunTrim(const TrimArgs& a) {
  if (a.n.has_value() == a.keep.has_value()) return Fail(kExitUsage, "give exactly one of -n and --keep");
  if ((a.n && *a.n < 0) || (a.keep && *a.keep < 0)) return Fail(kExitUsage, "token counts must be >= 0");
  kvstore::LoadPromptCacheOptions load;
  auto loaded = kvstore::LoadPromptCache(kvstore::Env::Default(), a.in, load);
  if (!loaded.ok()) return Fail(loaded.status());
  for (size_t i = 0; i < loaded->cache.size(); ++i) {
    if (!loaded->cache[i]->IsTrimmable()) {
      return Fail(kExitUnsupported, "layer " + std::to_string(i) + " (" +
                                        std::string(loaded->cache[i]->class_name()) + ") is not trimmable");
    }
  }
  int64_t n = a.n.value_or(0);
  if (a.keep) {
    int64_t tokens = 0;
    for (const auto& c : loaded->cache) tokens = std::max(tokens, c->offset().value_or(0));
    n = std::max<int64_t>(0, tokens - *a.keep);
  }
  auto trimmed = kvstore::TrimPromptCache(loaded->cache, n);
  if (!trimmed.ok()) return Fail(trimmed.status());
  kvstore::SavePromptCacheOptions save;
  if (loaded->compressed) save.compression_level = 3;
  kvstore::Status s = kvstore::SavePromptCache(kvstore::Env::Default(), a.out, loaded->cache,
                                               loaded->user_metadata, save);
  if (!s.ok()) return Fail(s);
  if (!a.quiet) std::fprintf(stderr, "kvtool: trimmed %lld tokens, wrote %s\n", static_cast<long long>(*trimmed), a.out.c_str());
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
  cmd->add_flag("-q,--quiet", args->quiet, "no summary on stderr");
  return [args, cmd] { return *cmd ? RunTrim(*args) : -1; };
}

}  // namespace kvtool
