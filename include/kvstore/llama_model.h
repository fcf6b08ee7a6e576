// What a cache conversion between llama.cpp and mlx-lm must know about the
// model, since neither cache file says which model it belongs to: the layer
// and head counts, head dims, and how each engine orders the channels that
// RoPE rotates together.
//
// The description is read from a Hugging Face config.json (or its folder) or
// from a GGUF file, of which only the header's key/value metadata is parsed
// (never a tensor). The architecture is looked up in a fixed table
// (RopeArchitectures()); an architecture that is not in it is refused by
// name, never guessed. Models whose caches cannot be converted (sliding
// window, hybrid or recurrent layers, latent attention, M-RoPE) are refused
// naming the reason.
//
// Thread safety: pure functions over values.
#ifndef KVSTORE_LLAMA_MODEL_H_
#define KVSTORE_LLAMA_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvstore/dtype.h"
#include "kvstore/env.h"
#include "kvstore/status.h"

namespace kvstore {

// How the channels of one KV head of K correspond between the engines.
enum class KeyChannelOrder {
  // The same order: llama.cpp's RoPE pairs channels (i, i + D/2) as Hugging
  // Face and mlx-lm do (llama.cpp's "NEOX" style), or both pair adjacent ones.
  kSame,
  // llama.cpp's GGUF converter permuted the Q/K weights so that its "NORM"
  // RoPE pairs adjacent channels: llama.cpp channels (2i, 2i+1) of a head
  // are mlx-lm channels (i, i + D/2). V is never permuted.
  kAdjacentPairs,
};

// One row of the RoPE pairing table.
struct RopeArchitecture {
  std::string_view name;            // Hugging Face model_type, e.g. "mistral"
  std::string_view llama_cpp_name;  // GGUF general.architecture, e.g. "llama"
  std::string_view rope_style;      // llama.cpp's RoPE type: "norm" or "neox"
  KeyChannelOrder key_order;
};

// Every architecture a conversion accepts.
std::span<const RopeArchitecture> RopeArchitectures();

// The row for `name` (a Hugging Face model_type or a GGUF architecture).
// NotSupported naming it when the table refuses it (with the reason: sliding
// window, hybrid/recurrent, latent attention, M-RoPE) or does not know it.
Result<RopeArchitecture> LookupRopeArchitecture(std::string_view name);

struct LlamaModelInfo {
  std::string source;        // "config.json" or "GGUF"
  std::string architecture;  // as the source names it
  RopeArchitecture rope;     // the table row
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  int64_t rope_dims = 0;        // channels of each head that RoPE rotates
  std::optional<DType> dtype;   // the model's float type when the source says (F32, F16, BF16)

  int64_t n_embd_k() const { return n_head_kv * head_dim_k; }
  int64_t n_embd_v() const { return n_head_kv * head_dim_v; }
};

// Parses a Hugging Face config.json. InvalidArgument naming the key when a
// required count is missing or not a positive integer (model_type,
// num_hidden_layers, num_attention_heads, hidden_size or head_dim), or when
// the head dim or rotary dims do not divide out; NotSupported as for
// LookupRopeArchitecture, and for configs that declare sliding-window or
// non-attention layers, latent attention (kv_lora_rank) or M-RoPE.
Result<LlamaModelInfo> ParseHfConfig(std::string_view json_text);

// Parses the key/value metadata at the start of a GGUF file (version 2 or 3);
// `bytes` must hold at least the header (the whole mapping is fine: tensor
// infos and data are not read). Corruption for malformed or truncated
// metadata (every length is checked against the bytes that remain),
// NotSupported for GGUF v1 or a big-endian file and as for ParseHfConfig.
Result<LlamaModelInfo> ParseGgufModel(std::span<const std::byte> bytes);

// Reads `path`: a GGUF file (recognised by its magic), a config.json, or a
// folder holding config.json. NotFound when it does not exist.
Result<LlamaModelInfo> ReadLlamaModel(Env* env, const std::string& path);

}  // namespace kvstore

#endif  // KVSTORE_LLAMA_MODEL_H_
