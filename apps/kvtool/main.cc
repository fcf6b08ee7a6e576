// kvtool: the operator's command-line tool for kvstore cache files.
#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"kvtool: inspect, verify, trim and convert LLM KV-cache files"};
  app.set_version_flag("--version", std::string("kvtool ") + KVSTORE_VERSION);
  app.require_subcommand(0, 1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
