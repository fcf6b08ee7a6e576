// kvtool ls DIR: a table of the prompt-cache files in a directory, from
// their headers alone (compressed files: only the header frame).
#include <algorithm>
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "apps/kvtool/shared.h"

namespace kvtool {
namespace {

using kvstore::Json;

struct LsArgs {
  std::string dir;
  bool json = false;
  bool all = false;
  std::shared_ptr<SharedArgs> shared;
};

int RunLs(const LsArgs& a) {
  if (IsSharedTierUrl(a.dir)) return LsShared(a.dir, *a.shared, a.json);
  kvstore::Env* env = kvstore::Env::Default();
  auto names = env->GetChildren(a.dir);
  if (!names.ok()) return Fail(names.status());
  std::sort(names->begin(), names->end());
  Json files = Json::MakeArray();
  Json skipped = Json::MakeArray();
  if (!a.json) {
    std::printf("%-36s %-28s %-13s %6s %8s %10s  %s\n", "file", "format", "layout", "layers", "tokens", "size",
                "integrity");
  }
  size_t caches = 0, others = 0;
  for (const std::string& name : *names) {
    const std::string path = a.dir + "/" + name;
    auto info = kvstore::ReadPromptCacheInfo(env, path);
    if (!info.ok()) {
      ++others;
      if (a.json) {
        Json s = Json::MakeObject();
        s["name"] = Json(name);
        s["error"] = Json(std::string(info.status().message()));
        skipped.Push(std::move(s));
      } else if (a.all) {
        std::printf("%-36s (not a cache file: %s)\n", TerminalText(name).c_str(),
                    TerminalText(info.status().message()).c_str());
      }
      continue;
    }
    ++caches;
    const int64_t tokens = info->tokens().value_or(-1);
    const std::string format = info->format();
    const std::string layout(kvstore::LayoutName(info->layout));
    if (a.json) {
      Json f = Json::MakeObject();
      f["name"] = Json(name);
      f["format"] = Json(format);
      f["layout"] = Json(layout);
      f["layers"] = Json(static_cast<int64_t>(info->layers.size()));
      f["tokens"] = tokens >= 0 ? Json(tokens) : Json();
      f["file_bytes"] = Json(info->file_bytes);
      f["tensor_bytes"] = Json(info->tensor_bytes);
      f["integrity"] = info->has_digests ? Json(std::string(kvstore::DigestAlgorithmName(info->digest_algorithm))) : Json();
      files.Push(std::move(f));
    } else {
      // File names are anyone's bytes (a downloaded file): escaped, whatever stdout is.
      std::printf("%-36s %-28s %-13s %6zu %8s %10s  %s\n", TerminalText(name).c_str(), format.c_str(), layout.c_str(),
                  info->layers.size(), tokens >= 0 ? std::to_string(tokens).c_str() : "-",
                  HumanBytes(info->file_bytes).c_str(), info->has_digests ? std::string(kvstore::DigestAlgorithmName(info->digest_algorithm)).c_str() : "none");
    }
  }
  if (a.json) {
    Json out = Json::MakeObject();
    out["dir"] = Json(a.dir);
    out["files"] = std::move(files);
    out["skipped"] = std::move(skipped);
    PrintJson(out);
  } else {
    std::printf("%zu cache %s", caches, caches == 1 ? "file" : "files");
    if (others > 0) {
      std::printf(", %zu other %s%s", others, others == 1 ? "file" : "files", a.all ? "" : " (--all lists them)");
    }
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace

Runner RegisterLs(CLI::App& app) {
  auto args = std::make_shared<LsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ls", "List the cache files in a directory (headers only), or the namespaces and chains of a shared tier in Redis");
  cmd->add_option("DIR", args->dir, "directory, or redis://[USER:PASSWORD@]HOST:PORT of a shared tier")
      ->required()
      ->check(NonEmpty())
      ->transform(UserPath());
  cmd->add_flag("--json", args->json, "one JSON object instead of the table");
  cmd->add_flag("--all", args->all, "also list the files that are not cache files, with the reason");
  args->shared = AddSharedLsOptions(cmd);
  return [args, cmd] { return *cmd ? RunLs(*args) : -1; };
}

}  // namespace kvtool
