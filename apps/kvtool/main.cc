// kvtool: the operator's command-line tool for kvstore cache files.
// Exit codes: 0 ok, 1 usage, 2 I/O, not found or access refused, 3 corruption
// or failed verification, 4 unsupported (docs/cli.md).
#include <CLI/CLI.hpp>

#include <vector>

#include "apps/kvtool/kvtool.h"

int main(int argc, char** argv) {
  kvtool::InstallSignalHandlers();
  CLI::App app{
      "kvtool: inspect, verify, convert, trim, diff and list LLM KV-cache files; ls and inspect also read a shared "
      "tier in Redis (a redis://[USER:PASSWORD@]HOST:PORT URL instead of DIR or FILE)"};
  kvtool::SetUpUsage(app);  // before the subcommands, which inherit it
  app.set_version_flag("--version", std::string("kvtool ") + KVSTORE_VERSION);
  app.require_subcommand(1, 1);
  std::vector<kvtool::Runner> runners = {kvtool::RegisterInspect(app), kvtool::RegisterVerify(app),
                                         kvtool::RegisterConvert(app), kvtool::RegisterTrim(app),
                                         kvtool::RegisterDiff(app),    kvtool::RegisterLs(app)};
  if (std::optional<int> refused = kvtool::CheckArguments(app, argc, argv)) return *refused;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return kvtool::ReportParseError(app, e);
  }
  for (const auto& run : runners) {
    const int code = run();
    if (code >= 0) return code;
  }
  return kvtool::kExitUsage;
}
