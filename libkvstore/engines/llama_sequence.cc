// The rules that make a llama.cpp state convertible: one sequence, positions
// 0..T-1 (cells may be in any order), and the token list that goes with it.
#include <algorithm>
#include <string>

#include "kvstore/json.h"
#include "kvstore/llama_cpp.h"

namespace kvstore {
namespace {

Status Refuse(const std::string& why) {
  return Status::NotSupported("llama.cpp state: " + why + "; only positions 0..T-1 of one sequence convert");
}

}  // namespace

Result<LlamaSequence> FindLlamaSequence(const LlamaState& state) {
  LlamaSequence seq;
  size_t non_empty = 0;
  for (size_t s = 0; s < state.streams.size(); ++s) {
    if (state.streams[s].cell_count() == 0) continue;
    if (non_empty++ == 0) seq.stream = s;
  }
  if (non_empty == 0) return Refuse("the file holds no cells (an empty slot)");
  if (non_empty > 1) return Refuse(std::to_string(non_empty) + " streams hold cells");
  const LlamaStateStream& st = state.streams[seq.stream];
  const std::string where = "stream " + std::to_string(seq.stream);
  seq.seq_id = st.seq_ids[0];
  for (int32_t id : st.seq_ids) {
    if (id != seq.seq_id) {
      return Refuse(where + " holds several sequences (seq ids " + std::to_string(seq.seq_id) + " and " +
                    std::to_string(id) + ")");
    }
  }
  const size_t n = st.cell_count();
  std::vector<int32_t> sorted = st.positions;
  std::sort(sorted.begin(), sorted.end());
  if (sorted[0] != 0) {
    return Refuse(where + " positions start at " + std::to_string(sorted[0]) +
                  ", not 0 (a shifted context: llama.cpp discarded or shifted earlier tokens)");
  }
  for (size_t i = 1; i < n; ++i) {
    if (sorted[i] == sorted[i - 1]) {
      return Refuse(where + " holds position " + std::to_string(sorted[i]) + " in more than one cell");
    }
    if (sorted[i] != static_cast<int32_t>(i)) {
      return Refuse(where + " position " + std::to_string(i) + " is missing (the positions have a gap up to " +
                    std::to_string(sorted[i]) + ")");
    }
  }
  seq.cell_of_position.resize(n);
  for (size_t i = 0; i < n; ++i) seq.cell_of_position[st.positions[i]] = static_cast<uint32_t>(i);
  return seq;
}

Result<std::vector<int32_t>> ParseTokenList(std::string_view json_text) {
  Result<Json> parsed = Json::Parse(json_text);
  if (!parsed.ok()) return Status::InvalidArgument("tokens: " + std::string(parsed.status().message()));
  if (!parsed->is_array()) return Status::InvalidArgument("tokens: not a JSON list of token ids");
  std::vector<int32_t> out;
  out.reserve(parsed->size());
  for (const Json& t : parsed->as_array()) {
    if (!t.is_integer() || t.type() == Json::Type::kUint || t.as_int() < 0 || t.as_int() > INT32_MAX) {
      return Status::InvalidArgument("tokens: entry " + std::to_string(out.size()) + " (" + t.Dump() +
                                     ") is not a token id (an integer in 0..2^31-1)");
    }
    out.push_back(static_cast<int32_t>(t.as_int()));
  }
  return out;
}

}  // namespace kvstore
