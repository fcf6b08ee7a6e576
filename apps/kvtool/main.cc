// kvtool: the operator's command-line tool for kvstore cache files.
// Exit codes: 0 ok, 1 usage, 2 I/O or not found, 3 corruption or failed
// verification, 4 unsupported (docs/cli.md).
#include <CLI/CLI.hpp>

#include <vector>

#include "apps/kvtool/kvtool.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtool: inspect, verify, trim, convert, diff and list LLM KV-cache files"};
  app.set_version_flag("--version", std::string("kvtool ") + KVSTORE_VERSION);
  app.require_subcommand(1, 1);
  std::vector<kvtool::Runner> runners = {kvtool::RegisterInspect(app), kvtool::RegisterVerify(app),
                                         kvtool::RegisterConvert(app), kvtool::RegisterTrim(app),
                                         kvtool::RegisterDiff(app),    kvtool::RegisterLs(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help/version or the usage error
    return code == 0 ? kvtool::kExitOk : kvtool::kExitUsage;
  }
  for (const auto& run : runners) {
    const int code = run();
    if (code >= 0) return code;
  }
  return kvtool::kExitUsage;
}
