// ParseLlamaState: the strict ggsq v2 reader (layout in llama_state.h and
// docs/format.md §7). Every count is checked against the bytes that remain
// before anything is allocated.
#include <string>

#include "kvstore/llama_state.h"
#include "libkvstore/engines/byte_cursor.h"

namespace kvstore {
namespace {

using engines::ByteCursor;
using engines::CheckedMul;

constexpr std::string_view kWhat = "llama.cpp state";

std::string Where(size_t stream, size_t layer, std::string_view tensor) {
  return "stream " + std::to_string(stream) + " layer " + std::to_string(layer) + " " + std::string(tensor);
}

Result<GgmlType> CheckType(const ByteCursor& c, int32_t type, const std::string& where) {
  if (type == 0 || type == 1 || type == 30) return static_cast<GgmlType>(type);
  return c.Unsupported(where + " type " + GgmlTypeName(type) + " (ggml type " + std::to_string(type) +
                       "): only f32, f16 and bf16 caches are supported; quantized KV caches are not "
                       "(run llama.cpp with --cache-type-k/--cache-type-v f16, bf16 or f32)");
}

// `count` items of at least `min_each` bytes each must fit in what remains.
Status CheckFits(const ByteCursor& c, uint64_t count, uint64_t min_each, const std::string& field) {
  uint64_t need = 0;
  if (!CheckedMul(count, min_each, &need) || need > c.remaining()) {
    return c.Corrupt(field + " " + std::to_string(count) + " needs at least " +
                     (need == 0 && count != 0 ? std::string("2^64") : std::to_string(need)) + " bytes, " +
                     std::to_string(c.remaining()) + " remain");
  }
  return Status::OK();
}

// Reads one layer's data block of `rows` x `row_bytes` and returns its offset.
Result<uint64_t> TakeData(ByteCursor& c, uint64_t rows, uint64_t row_bytes, const std::string& where) {
  uint64_t n = 0;
  if (!CheckedMul(rows, row_bytes, &n)) return c.Corrupt(where + " data size overflows 64 bits");
  const uint64_t offset = c.offset();
  KV_RETURN_IF_ERROR(c.Skip(n, where + " data"));
  return offset;
}

// A row size of `row_bytes` for elements of `type`: the element count.
Result<uint32_t> RowElements(const ByteCursor& c, uint64_t row_bytes, GgmlType type, const std::string& where) {
  const uint64_t es = DTypeSize(GgmlTypeToDType(type));
  if (row_bytes == 0 || row_bytes % es != 0 || row_bytes / es > UINT32_MAX) {
    return c.Corrupt(where + " row size " + std::to_string(row_bytes) + " is not a positive whole number of " +
                     GgmlTypeName(static_cast<int32_t>(type)) + " elements");
  }
  return static_cast<uint32_t>(row_bytes / es);
}

Status ParseCells(ByteCursor& c, size_t s, uint32_t cell_count, uint32_t cell_ext, LlamaStateStream& out) {
  const std::string stream = "stream " + std::to_string(s);
  KV_RETURN_IF_ERROR(CheckFits(c, cell_count, 12 + cell_ext, stream + " cell_count"));
  out.positions.resize(cell_count);
  out.seq_ids.resize(cell_count);
  for (uint32_t i = 0; i < cell_count; ++i) {
    const std::string cell = stream + " cell " + std::to_string(i);
    KV_ASSIGN_OR_RETURN(int32_t pos, c.Read<int32_t>(cell + " pos"));
    KV_ASSIGN_OR_RETURN(uint32_t n_seq_id, c.Read<uint32_t>(cell + " n_seq_id"));
    KV_RETURN_IF_ERROR(c.Skip(cell_ext, cell + " position extension"));
    if (n_seq_id != 1) {
      return c.Corrupt(cell + ": n_seq_id " + std::to_string(n_seq_id) +
                       " (a sequence-state file has exactly one sequence id per cell)");
    }
    KV_ASSIGN_OR_RETURN(int32_t seq_id, c.Read<int32_t>(cell + " seq_id"));
    if (pos < 0) return c.Corrupt(cell + ": negative position " + std::to_string(pos));
    if (seq_id < 0) return c.Corrupt(cell + ": negative seq_id " + std::to_string(seq_id));
    out.positions[i] = pos;
    out.seq_ids[i] = seq_id;
  }
  return Status::OK();
}

Status ParseLayers(ByteCursor& c, size_t s, LlamaStateStream& out) {
  const uint64_t cells = out.cell_count();
  KV_ASSIGN_OR_RETURN(uint32_t v_trans, c.Read<uint32_t>("stream " + std::to_string(s) + " v_trans"));
  if (v_trans > 1) return c.Corrupt("stream " + std::to_string(s) + " v_trans " + std::to_string(v_trans) + " is not 0 or 1");
  out.v_trans = v_trans == 1;
  KV_ASSIGN_OR_RETURN(uint32_t n_layer, c.Read<uint32_t>("stream " + std::to_string(s) + " n_layer"));
  if (n_layer == 0) return c.Corrupt("stream " + std::to_string(s) + " n_layer is 0");
  // Each layer has at least a 12-byte K and a 12-byte V descriptor.
  KV_RETURN_IF_ERROR(CheckFits(c, n_layer, 24, "stream " + std::to_string(s) + " n_layer"));
  out.layers.resize(n_layer);
  for (uint32_t l = 0; l < n_layer; ++l) {
    const std::string where = Where(s, l, "K");
    LlamaStateLayer& layer = out.layers[l];
    KV_ASSIGN_OR_RETURN(int32_t type, c.Read<int32_t>(where + " type"));
    KV_ASSIGN_OR_RETURN(layer.k_type, CheckType(c, type, where));
    KV_ASSIGN_OR_RETURN(uint64_t row_bytes, c.Read<uint64_t>(where + " row size"));
    KV_ASSIGN_OR_RETURN(layer.n_embd_k, RowElements(c, row_bytes, layer.k_type, where));
    KV_ASSIGN_OR_RETURN(layer.k_offset, TakeData(c, cells, row_bytes, where));
  }
  for (uint32_t l = 0; l < n_layer; ++l) {
    const std::string where = Where(s, l, "V");
    LlamaStateLayer& layer = out.layers[l];
    KV_ASSIGN_OR_RETURN(int32_t type, c.Read<int32_t>(where + " type"));
    KV_ASSIGN_OR_RETURN(layer.v_type, CheckType(c, type, where));
    const uint32_t es = static_cast<uint32_t>(DTypeSize(GgmlTypeToDType(layer.v_type)));
    if (!out.v_trans) {
      KV_ASSIGN_OR_RETURN(uint64_t row_bytes, c.Read<uint64_t>(where + " row size"));
      KV_ASSIGN_OR_RETURN(layer.n_embd_v, RowElements(c, row_bytes, layer.v_type, where));
      KV_ASSIGN_OR_RETURN(layer.v_offset, TakeData(c, cells, row_bytes, where));
      continue;
    }
    KV_ASSIGN_OR_RETURN(uint32_t element_bytes, c.Read<uint32_t>(where + " element size"));
    if (element_bytes != es) {
      return c.Corrupt(where + " element size " + std::to_string(element_bytes) + " != " + std::to_string(es) +
                       " for type " + GgmlTypeName(type));
    }
    KV_ASSIGN_OR_RETURN(layer.n_embd_v, c.Read<uint32_t>(where + " n_embd_v_gqa"));
    if (layer.n_embd_v == 0) return c.Corrupt(where + " n_embd_v_gqa is 0");
    KV_ASSIGN_OR_RETURN(layer.v_offset, TakeData(c, uint64_t{layer.n_embd_v} * cells, es, where));
  }
  return Status::OK();
}

// One memory section: n_stream and its streams.
Status ParseSection(ByteCursor& c, uint32_t cell_ext, std::vector<LlamaStateStream>& streams) {
  KV_ASSIGN_OR_RETURN(uint32_t n_stream, c.Read<uint32_t>("n_stream"));
  if (n_stream == 0) return c.Corrupt("n_stream is 0");
  if (n_stream > kLlamaStateMaxStreams) {
    return Status::ResourceExhausted(std::string(kWhat) + ": n_stream " + std::to_string(n_stream) + " > " +
                                     std::to_string(kLlamaStateMaxStreams));
  }
  KV_RETURN_IF_ERROR(CheckFits(c, n_stream, 4, "n_stream"));
  streams.resize(n_stream);
  for (uint32_t s = 0; s < n_stream; ++s) {
    KV_ASSIGN_OR_RETURN(uint32_t cell_count, c.Read<uint32_t>("stream " + std::to_string(s) + " cell_count"));
    if (cell_count == 0) continue;
    KV_RETURN_IF_ERROR(ParseCells(c, s, cell_count, cell_ext, streams[s]));
    KV_RETURN_IF_ERROR(ParseLayers(c, s, streams[s]));
  }
  return Status::OK();
}

// Streams of one file come from one cache: same v_trans and layer shapes.
Status CheckStreamsAgree(const ByteCursor& c, const std::vector<LlamaStateStream>& streams) {
  const LlamaStateStream* first = nullptr;
  for (size_t s = 0; s < streams.size(); ++s) {
    const LlamaStateStream& st = streams[s];
    if (st.cell_count() == 0) continue;
    if (first == nullptr) {
      first = &st;
      continue;
    }
    bool same = st.v_trans == first->v_trans && st.layers.size() == first->layers.size();
    for (size_t l = 0; same && l < st.layers.size(); ++l) {
      const LlamaStateLayer &a = st.layers[l], &b = first->layers[l];
      same = a.k_type == b.k_type && a.v_type == b.v_type && a.n_embd_k == b.n_embd_k && a.n_embd_v == b.n_embd_v;
    }
    if (!same) return c.Corrupt("stream " + std::to_string(s) + " has other layers or v_trans than the first non-empty stream");
  }
  return Status::OK();
}

Result<LlamaState> Parse(std::span<const std::byte> bytes, uint32_t cell_ext) {
  ByteCursor c(bytes, kWhat);
  if (bytes.size() < 4) return c.Corrupt("a file of " + std::to_string(bytes.size()) + " bytes has no magic");
  if (!LooksLikeLlamaState(bytes)) return c.Corrupt("magic is not 'ggsq' (not a llama.cpp sequence-state file)");
  KV_RETURN_IF_ERROR(c.Skip(4, "magic"));
  KV_ASSIGN_OR_RETURN(uint32_t version, c.Read<uint32_t>("version"));
  if (version != kLlamaStateVersion) {
    return c.Unsupported("version " + std::to_string(version) + " (only version 2 is supported)");
  }
  LlamaState state;
  KV_ASSIGN_OR_RETURN(uint32_t n_tokens, c.Read<uint32_t>("n_tokens"));
  KV_RETURN_IF_ERROR(CheckFits(c, n_tokens, 4, "n_tokens"));
  state.tokens.resize(n_tokens);
  for (uint32_t i = 0; i < n_tokens; ++i) state.tokens[i] = c.Read<int32_t>("token").value();
  KV_RETURN_IF_ERROR(ParseSection(c, cell_ext, state.streams));
  KV_RETURN_IF_ERROR(CheckStreamsAgree(c, state.streams));
  if (c.remaining() > 0) {
    // An iSWA model writes a second section for its sliding-window layers.
    ByteCursor rest(bytes.subspan(c.offset()), kWhat);
    std::vector<LlamaStateStream> second;
    if (ParseSection(rest, cell_ext, second).ok() && rest.remaining() == 0) {
      return c.Unsupported("a second KV-cache section of " + std::to_string(c.remaining()) +
                           " bytes follows the first (llama.cpp writes one for the sliding-window layers of an "
                           "iSWA model): sliding-window caches are not supported");
    }
    return c.Corrupt(std::to_string(c.remaining()) + " trailing bytes after the last stream at offset " +
                     std::to_string(c.offset()) + " (a hybrid or recurrent model's state, or a damaged file)");
  }
  return state;
}

}  // namespace

Result<LlamaState> ParseLlamaState(std::span<const std::byte> bytes) {
  Result<LlamaState> plain = Parse(bytes, 0);
  if (plain.ok() || !plain.status().IsCorruption()) return plain;
  // Models with M-RoPE (n_pos_per_embd > 1) write 2-D positions after each
  // cell's n_seq_id: 8 bytes (x, y), or 12 where a token id follows.
  for (uint32_t ext : {8u, 12u}) {
    if (Parse(bytes, ext).ok()) {
      return Status::NotSupported(std::string(kWhat) + ": the cells carry " + std::to_string(ext) +
                                  " extra bytes each (M-RoPE positions of a multimodal model such as qwen2-vl): "
                                  "M-RoPE caches are not supported");
    }
  }
  return plain;
}

}  // namespace kvstore
