// kvtool inspect on a llama.cpp sequence-state file: format, tokens, streams,
// cells and positions, layers, types and v_trans, and whether it converts.
#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <set>
#include <span>

#include "apps/kvtool/kvtool.h"
#include "apps/kvtool/llama.h"
#include "kvstore/llama_cpp.h"

namespace kvtool {
namespace {

using kvstore::Json;
using kvstore::LlamaState;
using kvstore::LlamaStateLayer;
using kvstore::LlamaStateStream;

// Sorted positions as inclusive ranges: {0..9, 12..20}.
std::vector<std::pair<int32_t, int32_t>> Ranges(std::vector<int32_t> pos) {
  std::sort(pos.begin(), pos.end());
  std::vector<std::pair<int32_t, int32_t>> out;
  for (int32_t p : pos) {
    if (!out.empty() && (p == out.back().second || p == out.back().second + 1)) {
      out.back().second = p;
    } else {
      out.emplace_back(p, p);
    }
  }
  return out;
}

std::string RangesText(const LlamaStateStream& s) {
  if (s.cell_count() == 0) return "-";
  const auto ranges = Ranges(s.positions);
  std::string out;
  for (size_t i = 0; i < ranges.size() && i < 4; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranges[i].first) + ".." + std::to_string(ranges[i].second);
  }
  if (ranges.size() > 4) out += ", ... (" + std::to_string(ranges.size()) + " runs)";
  if (!std::is_sorted(s.positions.begin(), s.positions.end())) out += " (cells out of order)";
  return out;
}

std::set<int32_t> SeqIds(const LlamaStateStream& s) { return {s.seq_ids.begin(), s.seq_ids.end()}; }

std::string Type(kvstore::GgmlType t) { return kvstore::GgmlTypeName(static_cast<int32_t>(t)); }

const LlamaStateStream* FirstWithCells(const LlamaState& st) {
  for (const LlamaStateStream& s : st.streams) {
    if (s.cell_count() > 0) return &s;
  }
  return nullptr;
}

Json StateJson(const std::string& path, uint64_t bytes, const LlamaState& st, const kvstore::Status& convertible) {
  Json out = Json::MakeObject();
  out["path"] = Json(path);
  out["format"] = Json("llama.cpp-ggsq");
  out["version"] = Json(int64_t{kvstore::kLlamaStateVersion});
  out["file_bytes"] = Json(bytes);
  out["n_tokens"] = Json(static_cast<int64_t>(st.tokens.size()));
  Json tokens = Json::MakeArray();
  for (int32_t t : st.tokens) tokens.Push(Json(int64_t{t}));
  out["tokens"] = std::move(tokens);
  out["n_stream"] = Json(static_cast<int64_t>(st.streams.size()));
  Json streams = Json::MakeArray();
  for (size_t i = 0; i < st.streams.size(); ++i) {
    const LlamaStateStream& s = st.streams[i];
    Json sj = Json::MakeObject();
    sj["index"] = Json(static_cast<int64_t>(i));
    sj["cells"] = Json(static_cast<int64_t>(s.cell_count()));
    Json ids = Json::MakeArray();
    for (int32_t id : SeqIds(s)) ids.Push(Json(int64_t{id}));
    sj["seq_ids"] = std::move(ids);
    Json ranges = Json::MakeArray();
    for (const auto& [a, b] : Ranges(s.positions)) ranges.Push(Json(Json::Array{Json(int64_t{a}), Json(int64_t{b})}));
    sj["positions"] = std::move(ranges);
    sj["cells_in_position_order"] = Json(std::is_sorted(s.positions.begin(), s.positions.end()));
    streams.Push(std::move(sj));
  }
  out["streams"] = std::move(streams);
  const LlamaStateStream* s = FirstWithCells(st);
  out["v_trans"] = s ? Json(int64_t{s->v_trans}) : Json();
  Json layers = Json::MakeArray();
  for (size_t l = 0; s && l < s->layers.size(); ++l) {
    const LlamaStateLayer& layer = s->layers[l];
    Json lj = Json::MakeObject();
    lj["index"] = Json(static_cast<int64_t>(l));
    lj["k_type"] = Json(Type(layer.k_type));
    lj["v_type"] = Json(Type(layer.v_type));
    lj["n_embd_k"] = Json(int64_t{layer.n_embd_k});
    lj["n_embd_v"] = Json(int64_t{layer.n_embd_v});
    lj["k_bytes"] = Json(LlamaState::KBytes(*s, layer));
    lj["v_bytes"] = Json(LlamaState::VBytes(*s, layer));
    layers.Push(std::move(lj));
  }
  out["layers"] = std::move(layers);
  if (!convertible.ok()) out["unsupported"] = Json(std::string(convertible.message()));
  return out;
}

void PrintState(const std::string& path, uint64_t bytes, const LlamaState& st, const kvstore::Status& convertible) {
  const LlamaStateStream* first = FirstWithCells(st);
  std::printf("%s: llama.cpp sequence state (ggsq v%u), %zu tokens, %zu stream%s, %zu layers, %s\n", path.c_str(),
              kvstore::kLlamaStateVersion, st.tokens.size(), st.streams.size(), st.streams.size() == 1 ? "" : "s",
              first ? first->layers.size() : 0, HumanBytes(bytes).c_str());
  std::printf("%-6s %8s  %-8s %-7s %s\n", "stream", "cells", "seq_id", "v_trans", "positions");
  for (size_t i = 0; i < st.streams.size(); ++i) {
    const LlamaStateStream& s = st.streams[i];
    std::string ids;
    for (int32_t id : SeqIds(s)) {
      if (!ids.empty()) ids += ",";
      ids += std::to_string(id);
    }
    std::printf("%-6zu %8zu  %-8s %-7s %s\n", i, s.cell_count(), ids.empty() ? "-" : ids.c_str(),
                s.cell_count() ? (s.v_trans ? "1" : "0") : "-", RangesText(s).c_str());
  }
  if (first) {
    std::printf("%-6s %-5s %8s %10s  %-5s %8s %10s\n", "layer", "K", "n_embd", "bytes", "V", "n_embd", "bytes");
    for (size_t l = 0; l < first->layers.size(); ++l) {
      const LlamaStateLayer& layer = first->layers[l];
      std::printf("%-6zu %-5s %8u %10s  %-5s %8u %10s\n", l, Type(layer.k_type).c_str(), layer.n_embd_k,
                  HumanBytes(LlamaState::KBytes(*first, layer)).c_str(), Type(layer.v_type).c_str(), layer.n_embd_v,
                  HumanBytes(LlamaState::VBytes(*first, layer)).c_str());
    }
  }
  std::string tokens;
  for (size_t i = 0; i < st.tokens.size() && i < 32; ++i) {
    if (i > 0) tokens += " ";
    tokens += std::to_string(st.tokens[i]);
  }
  if (st.tokens.size() > 32) tokens += " ... (" + std::to_string(st.tokens.size() - 32) + " more)";
  std::printf("tokens: %s\n", tokens.empty() ? "-" : tokens.c_str());
  if (!convertible.ok()) std::printf("note: cannot be converted: %s\n", std::string(convertible.message()).c_str());
}

}  // namespace

bool IsLlamaStateFile(const std::string& path) {
  // Reads the magic only (no mapping: llama-server rewrites slot files in place).
  std::ifstream in(path, std::ios::binary);
  std::array<char, 4> magic{};
  if (!in.read(magic.data(), magic.size())) return false;
  return kvstore::LooksLikeLlamaState(std::as_bytes(std::span(magic)));
}

int InspectLlamaState(const std::string& path, bool json, bool verify) {
  auto file = kvstore::Env::Default()->ReadIntoMemory(path);
  if (!file.ok()) return Fail(file.status());
  auto st = kvstore::ParseLlamaState((*file)->data());
  if (!st.ok()) return Fail(st.status().WithPrefix(path));
  const kvstore::Status convertible = kvstore::FindLlamaSequence(*st).status();
  if (json) {
    PrintJson(StateJson(path, (*file)->size(), *st, convertible));
  } else {
    PrintState(path, (*file)->size(), *st, convertible);
  }
  if (verify) return Fail(kExitUnsupported, path + ": llama.cpp state files carry no digests to verify");
  return kExitOk;
}

}  // namespace kvtool
