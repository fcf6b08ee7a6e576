// kvtool verify FILE: checks the structure of every layer (from the header)
// and every SHA-256 digest; exit 3 naming each impossible layer and each
// tensor that differs, 4 when the file carries no digests (after the
// structure has been reported) or has a layer kvstore cannot check. Warns
// (stderr, exit unchanged) when an mlx-lm loader would load the file as []
// or misread it.
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

struct Structure {
  size_t broken = 0;     // impossible layers (each named on stderr)
  size_t unchecked = 0;  // layers kvstore cannot load, so cannot check
  std::string Summary(size_t layers) const {
    std::string s = std::to_string(layers - broken - unchecked) + " layers well formed";
    if (unchecked > 0) s += ", " + std::to_string(unchecked) + " that kvstore cannot load not checked";
    return s;
  }
};

// What the header says about the layers; one line on stderr per impossible layer.
Structure CheckStructure(const std::string& path, const kvstore::PromptCacheInfo& info) {
  Structure out;
  for (const kvstore::LayerInfo& l : info.layers) {
    for (const std::string& e : l.errors) {
      (void)Fail(kExitCorruption, path + ": layer " + std::to_string(l.index) + " (" + l.class_name + "): " + e);
    }
    out.broken += l.errors.empty() ? 0 : 1;
    out.unchecked += l.errors.empty() && !l.unsupported.empty() ? 1 : 0;
  }
  return out;
}

int RunVerify(const VerifyArgs& a) {
  kvstore::PromptCacheReader::Options open;
  open.threads = a.threads;
  auto reader = kvstore::PromptCacheReader::Open(kvstore::Env::Default(), a.path, open);
  if (!reader.ok()) return Fail(reader.status());
  const kvstore::PromptCacheInfo& info = (*reader)->info();
  const Structure structure = CheckStructure(a.path, info);
  if (!a.quiet) {
    for (const std::string& w : info.mlx_lm_warnings) {
      std::fprintf(stderr, "kvtool: warning: %s: %s\n", TerminalText(a.path).c_str(), w.c_str());
    }
  }
  if (!info.has_digests) {
    if (structure.broken > 0) return kExitCorruption;
    if (!a.quiet) {
      std::printf("%s: %s\n", TerminalText(a.path).c_str(), structure.Summary(info.layers.size()).c_str());
    }
    std::fflush(stdout);
    return FailVerification(a.path, kvstore::VerifyReport{});
  }
  ProgressBar bar("verify", a.quiet);
  auto report = (*reader)->Verify(a.threads, bar.Callback());
  bar.Done();
  if (!report.ok()) return Fail(report.status());
  if (!report->mismatches.empty()) return FailVerification(a.path, *report);
  if (structure.broken > 0) return kExitCorruption;
  // Intact, but a layer kvstore cannot load cannot have its structure checked.
  if (kvstore::Status s = (*reader)->Validate(); !s.ok()) return Fail(s);
  if (!a.quiet) {
    std::printf("%s: OK (%s, %s verified)\n", TerminalText(a.path).c_str(),
                structure.Summary(info.layers.size()).c_str(), HumanBytes(report->bytes_hashed).c_str());
  }
  return kExitOk;
}

}  // namespace

int FailVerification(const std::string& path, const kvstore::VerifyReport& report) {
  if (!report.has_digests) {
    return Fail(kExitUnsupported, std::string(report.ToStatus(path).message()) +
                                      " (write it with kvstore, or run 'kvtool convert " + path +
                                      " -o OUT --integrity' to add them)");
  }
  // The library's message for each mismatch, one line each (not capped as
  // ToStatus's single message is).
  for (const kvstore::DigestMismatch& m : report.mismatches) (void)Fail(kExitCorruption, m.Message(path));
  return report.mismatches.empty() ? kExitOk : kExitCorruption;
}

Runner RegisterVerify(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "Check the structure and the SHA-256 digests of a cache file");
  cmd->add_option("FILE", args->path, "prompt-cache file")->required()->transform(UserPath());
  cmd->add_option("--threads", args->threads, "hashing threads (0 = all cores)");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress bar, nothing printed on success");
  return [args, cmd] { return *cmd ? RunVerify(*args) : -1; };
}

}  // namespace kvtool
