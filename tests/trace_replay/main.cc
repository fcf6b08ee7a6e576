// trace_replay: replays mlx-lm oracle traces (fixtures/traces/FORMAT.md)
// against libkvstore. One line per trace, then "N passed, M failed".
// Exit status 0 only when every trace passes.
//
//   trace_replay [-v] <trace dir>...   a dir holding trace.json, or a folder of such dirs
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/trace_replay/replayer.h"

namespace {

// Expands folders of traces into trace directories (sorted).
std::vector<std::string> TraceDirs(const std::string& arg) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::exists(fs::path(arg) / "trace.json", ec)) {
    out.push_back(arg);
    return out;
  }
  for (const auto& entry : fs::directory_iterator(arg, ec)) {
    if (fs::exists(entry.path() / "trace.json", ec)) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) out.push_back(arg);  // reported as a failure to load
  return out;
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
