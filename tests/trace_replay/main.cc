// trace_replay: replays mlx-lm oracle traces (fixtures/traces/FORMAT.md)
// against libkvstore. One line per trace, then "N passed, M failed".
// Exit status 0 only when every trace passes.
//
//   trace_replay [-v] <trace dir>...   a dir holding trace.json, or a folder of such dirs
//                                      (every trace its index.json lists, and any other)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/trace_replay/replayer.h"

namespace {

// The trace names a folder's index.json lists (FORMAT.md), or an error.
kvstore::Result<std::vector<std::string>> IndexedTraces(const std::filesystem::path& index) {
  std::ifstream in(index, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  KV_ASSIGN_OR_RETURN(kvstore::Json json, kvstore::Json::Parse(ss.str()));
  const kvstore::Json* traces = json.Find("traces");
  if (traces == nullptr || !traces->is_array()) return kvstore::Status::Corruption("no \"traces\" list");
  std::vector<std::string> names;
  for (const kvstore::Json& t : traces->as_array()) {
    const kvstore::Json* name = t.Find("name");
    if (name == nullptr || !name->is_string()) return kvstore::Status::Corruption("a trace without a name");
    names.push_back(name->as_string());
  }
  return names;
}

// Expands folders of traces into trace directories (sorted). A folder with
// an index.json yields every trace it lists, so that a listed trace that is
// missing fails to load instead of going unnoticed.
std::vector<std::string> TraceDirs(const std::string& arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(arg) / "trace.json", ec)) return {arg};
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(arg, ec)) {
    if (fs::exists(entry.path() / "trace.json", ec)) out.insert(entry.path().string());
  }
  const fs::path index = fs::path(arg) / "index.json";
  if (fs::exists(index, ec)) {
    kvstore::Result<std::vector<std::string>> listed = IndexedTraces(index);
    if (!listed.ok()) return {index.string()};  // reported as a failure to load
    for (const std::string& name : *listed) out.insert((fs::path(arg) / name).string());
  }
  if (out.empty()) return {arg};  // reported as a failure to load
  return std::vector<std::string>(out.begin(), out.end());
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-v" || arg == "--verbose") {
      verbose = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("usage: trace_replay [-v] <trace dir>...\n");
      return 0;
    } else {
      for (auto& d : TraceDirs(arg)) dirs.push_back(d);
    }
  }
  if (dirs.empty()) {
    std::fprintf(stderr, "usage: trace_replay [-v] <trace dir>...\n");
    return 2;
  }
  int passed = 0, failed = 0;
  for (const std::string& dir : dirs) {
    auto replayer = kvstore::trace::Replayer::Load(dir);
    if (!replayer.ok()) {
      std::printf("FAIL %s: %s\n", dir.c_str(), replayer.status().ToString().c_str());
      ++failed;
      continue;
    }
    std::vector<std::string> diffs = (*replayer)->Run();
    if (diffs.empty()) {
      std::printf("PASS %s (%zu ops)\n", (*replayer)->name().c_str(), (*replayer)->num_ops());
      ++passed;
    } else {
      std::printf("FAIL %s: %zu differences\n", (*replayer)->name().c_str(), diffs.size());
      size_t shown = verbose ? diffs.size() : std::min<size_t>(diffs.size(), 5);
      for (size_t i = 0; i < shown; ++i) std::printf("  %s\n", diffs[i].c_str());
      if (shown < diffs.size()) std::printf("  ... (%zu more; -v shows all)\n", diffs.size() - shown);
      ++failed;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
