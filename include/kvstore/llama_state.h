// llama.cpp sequence-state files ("ggsq", version 2): what libllama's
// llama_state_seq_save_file and llama-server's /slots/N?action=save write for
// one sequence of a plain attention KV cache (docs/format.md §7).
//
//   u32 magic 'ggsq' | u32 version 2 | u32 n_tokens | i32 tokens[n_tokens]
//   u32 n_stream | n_stream x stream
//   stream: u32 cell_count; when cell_count > 0:
//     cell_count x (i32 pos, u32 n_seq_id = 1, i32 seq_id)
//     u32 v_trans | u32 n_layer
//     n_layer x (i32 k_type, u64 k_row_bytes, k rows [cell][n_embd_k])
//     v_trans 0: n_layer x (i32 v_type, u64 v_row_bytes, v rows [cell][n_embd_v])
//     v_trans 1: n_layer x (i32 v_type, u32 v_element_bytes, u32 n_embd_v,
//                           v columns [n_embd_v][cell])
// Everything is little-endian. Only F32, F16 and BF16 caches are read or
// written; quantized types, M-RoPE cells, the second section of a
// sliding-window model and other versions are refused by name.
//
// Parsing is a pure function over bytes that treats them as hostile: every
// count and size is checked against the bytes that remain before anything is
// allocated, and trailing bytes are an error. The parser reads no tensor
// byte; it records where each layer's data lies.
//
// Thread safety: pure functions over values.
#ifndef KVSTORE_LLAMA_STATE_H_
#define KVSTORE_LLAMA_STATE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/dtype.h"
#include "kvstore/env.h"
#include "kvstore/file_kind.h"  // kLlamaStateMagic
#include "kvstore/status.h"

namespace kvstore {

inline constexpr uint32_t kLlamaStateVersion = 2;
// llama.cpp runs at most LLAMA_MAX_SEQ (256) streams; anything far above is hostile.
inline constexpr uint32_t kLlamaStateMaxStreams = 4096;

// The ggml element types of a KV cache that kvstore reads and writes.
enum class GgmlType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 30 };

// "f32", "f16", "bf16", the ggml name of other known types ("q8_0", ...), or
// "type N" for an unknown id.
std::string GgmlTypeName(int32_t type);
// GgmlType <-> DType (F32, F16, BF16 only).
DType GgmlTypeToDType(GgmlType type);
std::optional<GgmlType> DTypeToGgmlType(DType dtype);
// Parses "f32" | "f16" | "bf16".
std::optional<GgmlType> ParseGgmlType(std::string_view name);

struct LlamaStateLayer {
  GgmlType k_type = GgmlType::kF16;
  GgmlType v_type = GgmlType::kF16;
  uint32_t n_embd_k = 0;  // elements per K row (n_head_kv * head_dim_k)
  uint32_t n_embd_v = 0;  // elements per V row
  // Where the layer's K and V data start in the parsed bytes (0 for a layer
  // described in memory). K is [cells][n_embd_k]; V is [cells][n_embd_v], or
  // [n_embd_v][cells] when the stream's v_trans is set.
  uint64_t k_offset = 0;
  uint64_t v_offset = 0;
};

struct LlamaStateStream {
  std::vector<int32_t> positions;  // one per cell, in file order
  std::vector<int32_t> seq_ids;    // one per cell
  bool v_trans = false;
  std::vector<LlamaStateLayer> layers;  // empty when the stream has no cells
  size_t cell_count() const { return positions.size(); }
};

struct LlamaState {
  std::vector<int32_t> tokens;
  std::vector<LlamaStateStream> streams;  // n_stream entries; empty streams have no cells

  // Byte sizes of one layer's K and V data in `stream`.
  static uint64_t KBytes(const LlamaStateStream& stream, const LlamaStateLayer& layer);
  static uint64_t VBytes(const LlamaStateStream& stream, const LlamaStateLayer& layer);
  // The exact size of the file this state serialises to.
  uint64_t FileBytes() const;
};

// True when `bytes` starts with the ggsq magic (4 bytes suffice).
bool LooksLikeLlamaState(std::span<const std::byte> bytes);

// Parses a whole ggsq file. Errors (messages start with "llama.cpp state:"
// and name the field and the check):
//   Corruption: wrong magic, truncation, a count or size that does not fit
//     the remaining bytes, n_stream 0, a cell with n_seq_id != 1 or a negative
//     position or sequence id, a row size that is not a whole number of
//     elements, a transposed-V element size that does not match its type,
//     layers or v_trans that differ between streams, trailing bytes;
//   NotSupported: a version other than 2, a quantized or unknown K/V type,
//     cells that carry M-RoPE positions, a second KV section (sliding-window
//     models);
//   ResourceExhausted: more than kLlamaStateMaxStreams streams.
Result<LlamaState> ParseLlamaState(std::span<const std::byte> bytes);

// Serialises `state` as llama.cpp writes it. `data(stream, layer, value)`
// returns the layer's K (value false) or V (value true) bytes exactly as
// stored (V already transposed when the stream's v_trans is set), of size
// LlamaState::KBytes / VBytes; the span must stay valid until the next call.
// Writing a parsed llama.cpp file with the bytes at its offsets gives the
// same file. InvalidArgument when a stream is inconsistent (seq_ids and
// positions of different lengths, cells without layers) or `data` returns a
// span of the wrong size.
using LlamaStateDataFn =
    std::function<Result<std::span<const std::byte>>(size_t stream, size_t layer, bool value)>;
Status WriteLlamaState(WritableFile& out, const LlamaState& state, const LlamaStateDataFn& data);

// Writes `path` atomically (temp file, fsync, rename) with WriteLlamaState.
Status SaveLlamaState(Env* env, const std::string& path, const LlamaState& state,
                      const LlamaStateDataFn& data);

}  // namespace kvstore

#endif  // KVSTORE_LLAMA_STATE_H_
