// kvtool inspect FILE [--json] [--tensors] [--verify]: what a cache file
// holds, from its header alone (and, for a compressed file, its header
// frame), and whether every layer can be loaded: everything readable is
// printed first, then exit 3 for an impossible layer, 4 for one kvstore
// cannot load; with --verify, as `kvtool verify`: 3 for a digest mismatch,
// 4 for a file without digests (docs/cli.md).
#include <algorithm>
#include <cstdio>
#include <functional>

#include "apps/kvtool/kvtool.h"
#include "kvstore/prompt_cache_info_json.h"
#include "apps/kvtool/llama.h"
#include "apps/kvtool/shared.h"

namespace kvtool {
namespace {

using kvstore::LayerInfo;
using kvstore::MetaState;
using kvstore::PromptCacheInfo;

// The meta state as JSON (which already escapes control characters below
// U+0020 and keeps its own backslashes), shortened, with DEL, C1 controls
// and anything else a terminal would act on escaped.
std::string MetaText(const MetaState& m) {
  return TerminalText(Abbreviated(kvstore::MetaStateJson(m).Dump(), 40), /*keep_lines=*/true);
}

// What the layer holds: its tensors grouped by dtype and shape in order of
// first appearance ("BF16[1, 3, 128], F32[1, 4, 16, 8], F32[0] x2"); for a
// CacheList, the count (its children's rows follow it).
std::string Describe(const LayerInfo& layer) {
  if (layer.tensors.empty()) return "-";
  if (!layer.children.empty()) return std::to_string(layer.tensors.size()) + " tensors";
  std::vector<std::pair<std::string, size_t>> groups;
  for (const auto& t : layer.tensors) {
    const std::string what = std::string(kvstore::DTypeName(t.dtype)) + kvstore::ShapeToString(t.shape);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == what; });
    if (it == groups.end()) groups.emplace_back(what, 1);
    else ++it->second;
  }
  std::string out;
  for (const auto& [what, n] : groups) {
    out += (out.empty() ? "" : ", ") + what + (n > 1 ? " x" + std::to_string(n) : "");
  }
  return out;
}

uint64_t LayerBytes(const LayerInfo& layer) {
  uint64_t n = 0;
  for (const auto& t : layer.tensors) n += t.nbytes;
  return n;
}

// The tensors column is as wide as its widest entry (at least 28).
int TensorsWidth(const std::vector<LayerInfo>& layers, const std::string& indent) {
  size_t width = 28;
  for (const LayerInfo& l : layers) {
    width = std::max(width, Describe(l).size() + indent.size());
    width = std::max<size_t>(width, TensorsWidth(l.children, indent + "  "));
  }
  return static_cast<int>(width);
}

void PrintLayer(const LayerInfo& layer, const std::string& indent, int width, bool tensors) {
  const std::optional<int64_t>& offset = layer.offset;
  std::printf("%s%-5zu %-22s %8s  %-*s %10s  %s\n", indent.c_str(), layer.index,
              TerminalText(layer.class_name).c_str(), offset ? std::to_string(*offset).c_str() : "-",
              width - static_cast<int>(indent.size()),
              Describe(layer).c_str(), HumanBytes(LayerBytes(layer)).c_str(), MetaText(layer.meta_state).c_str());
  if (tensors && layer.children.empty()) {
    for (const auto& t : layer.tensors) {
      std::printf("%s      %-20s %-5s %-22s %10s\n", indent.c_str(), TerminalText(t.name).c_str(),
                  std::string(kvstore::DTypeName(t.dtype)).c_str(), kvstore::ShapeToString(t.shape).c_str(),
                  HumanBytes(t.nbytes).c_str());
    }
  }
  for (const LayerInfo& c : layer.children) PrintLayer(c, indent + "  ", width, tensors);
}

void PrintNotes(const LayerInfo& l, const std::string& where) {
  for (const std::string& e : l.errors) {
    std::printf("error: %s%zu (%s): %s\n", where.c_str(), l.index, TerminalText(l.class_name).c_str(),
                TerminalText(e).c_str());
  }
  if (!l.unsupported.empty()) {
    std::printf("note: %s%zu cannot be loaded: %s\n", where.c_str(), l.index, TerminalText(l.unsupported).c_str());
  }
  for (const LayerInfo& c : l.children) PrintNotes(c, where + std::to_string(l.index) + " child ");
}

void PrintTable(const std::string& path, const PromptCacheInfo& info, std::optional<bool> verified, bool tensors) {
  const int64_t tokens = info.tokens().value_or(-1);
  const std::string algorithm(kvstore::DigestAlgorithmName(info.digest_algorithm));
  const std::string integrity = !info.has_digests ? "none"
                                : !verified       ? algorithm + " (not checked)"
                                : *verified       ? algorithm + " verified"
                                                  : algorithm + " MISMATCH";
  std::string ratio;
  if (info.compression && info.file_bytes > 0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), ", ratio %.2fx", static_cast<double>(info.tensor_bytes) / info.file_bytes);
    ratio = buf;
  }
  std::printf("%s: %s, layout %s, %zu layers, %s tokens, %s payload in %s%s, integrity %s\n",
              TerminalText(path).c_str(), info.format().c_str(), std::string(kvstore::LayoutName(info.layout)).c_str(),
              info.layers.size(), tokens >= 0 ? std::to_string(tokens).c_str() : "?",
              HumanBytes(info.tensor_bytes).c_str(), HumanBytes(info.file_bytes).c_str(), ratio.c_str(),
              integrity.c_str());
  std::printf("mlx-lm: loads in %s\n", info.mlx_lm_versions().c_str());
  for (const std::string& w : info.mlx_lm_warnings) std::printf("warning: %s\n", w.c_str());
  const int width = TensorsWidth(info.layers, "");
  std::printf("%-5s %-22s %8s  %-*s %10s  %s\n", "layer", "class", "offset", width, "tensors", "bytes", "meta_state");
  for (const LayerInfo& l : info.layers) PrintLayer(l, "", width, tensors);
  for (const LayerInfo& l : info.layers) PrintNotes(l, "layer ");
  if (!info.unsupported.empty()) {
    std::printf("note: the file cannot be loaded: %s\n", TerminalText(info.unsupported).c_str());
  }
  if (!info.user_metadata.empty()) {
    std::printf("metadata:\n");
    // Keys and values are anyone's bytes: escaped, whatever stdout is.
    for (const auto& [k, v] : info.user_metadata) {
      std::printf("  %-20s %s\n", TerminalText(k).c_str(), TerminalText(Abbreviated(v, 60)).c_str());
    }
  }
}

struct InspectArgs {
  std::string path;
  bool json = false;
  bool tensors = false;
  bool verify = false;
  std::shared_ptr<SharedArgs> shared;
};

int RunInspect(const InspectArgs& a) {
  if (IsSharedTierUrl(a.path)) return InspectShared(a.path, *a.shared, a.json, a.verify);
  if (IsLlamaStateFile(a.path)) return InspectLlamaState(a.path, a.json, a.verify);
  auto reader = kvstore::PromptCacheReader::Open(kvstore::Env::Default(), a.path);
  if (!reader.ok()) return Fail(reader.status());
  const PromptCacheInfo& info = (*reader)->info();
  std::optional<kvstore::VerifyReport> report;
  if (a.verify && info.has_digests) {
    auto r = (*reader)->Verify();
    if (!r.ok()) return Fail(r.status());
    report = std::move(r).value();
  }
  const std::optional<bool> verified = report ? std::optional(report->ok()) : std::nullopt;
  if (a.json) {
    PrintJson(kvstore::PromptCacheInfoJson(info, a.path, verified));
  } else {
    PrintTable(a.path, info, verified, a.tensors);
  }
  std::fflush(stdout);
  // As `verify`: mismatches (exit 3), the first impossible layer (3), what
  // cannot be loaded (4), then a file without digests to verify (4).
  if (report && !report->ok()) return FailVerification(a.path, *report);
  if (kvstore::Status s = (*reader)->Validate(); !s.ok()) return Fail(s);
  if (a.verify && !info.has_digests) return FailVerification(a.path, kvstore::VerifyReport{});
  return kExitOk;
}

}  // namespace

Runner RegisterInspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show what a cache file (or a shared tier's chunk in Redis) holds and check its layers (reads the header only)");
  cmd->add_option("FILE", args->path,
                  "prompt-cache file (.safetensors, optionally zstd-compressed), llama.cpp state file, or "
                  "redis://[USER:PASSWORD@]HOST:PORT of a shared tier (with --key)")
      ->required()
      ->check(NonEmpty())
      ->transform(UserPath());
  cmd->add_flag("--json", args->json, "one JSON object instead of the table");
  cmd->add_flag("--tensors", args->tensors, "list every tensor under its layer");
  cmd->add_flag("--verify", args->verify, "also check the SHA-256 digests (reads the tensors)");
  args->shared = AddSharedInspectOptions(cmd);
  return [args, cmd] { return *cmd ? RunInspect(*args) : -1; };
}

}  // namespace kvtool
