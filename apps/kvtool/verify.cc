// kvtool verify FILE: checks every SHA-256 digest; exit 3 naming what differs.
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "apps/kvtool/progress.h"

namespace kvtool {
namespace {

struct VerifyArgs {
  std::string path;
  int threads = 0;
  bool quiet = false;
};

int RunVerify(const VerifyArgs& a) {
  ProgressBar bar("verify", a.quiet);
  auto report = kvstore::VerifyPromptCacheFile(kvstore::Env::Default(), a.path, a.threads, bar.Callback());
  if (!report.ok()) return Fail(report.status());
  if (!report->has_digests) {
    return Fail(kExitUnsupported, a.path + ": the file carries no digests (write it with kvstore, or run "
                                           "'kvtool convert " + a.path + " -o OUT --integrity' to add them)");
  }
  if (!report->mismatches.empty()) {
    for (const std::string& m : report->mismatches) {
      std::fprintf(stderr, "kvtool: %s: digest mismatch in %s\n", a.path.c_str(),
                   m == "header" ? "the header" : ("tensor \"" + m + "\"").c_str());
    }
    return kExitCorruption;
  }
  if (!a.quiet) {
    std::printf("%s: OK (%s verified)\n", a.path.c_str(), HumanBytes(report->bytes_hashed).c_str());
  }
  return kExitOk;
}

}  // namespace

Runner RegisterVerify(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "Check the SHA-256 digests of a cache file");
  cmd->add_option("FILE", args->path, "prompt-cache file")->required();
  cmd->add_option("--threads", args->threads, "hashing threads (0 = all cores)");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress bar, nothing printed on success");
  return [args, cmd] { return *cmd ? RunVerify(*args) : -1; };
}

}  // namespace kvtool
