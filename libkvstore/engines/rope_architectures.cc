// The RoPE pairing table: for each architecture, whether llama.cpp's K
// channels are in mlx-lm's order or permuted into adjacent RoPE pairs.
//
// An architecture enters the table only when both facts are known: the
// llama.cpp RoPE type of its GGUF architecture (llama_model_rope_type) and
// whether convert_hf_to_gguf.py permutes its Q/K weights (LlamaModel.permute
// and the classes that inherit it). Everything else is refused by name.
#include <array>
#include <string>

#include "kvstore/llama_model.h"

namespace kvstore {
namespace {

constexpr KeyChannelOrder kPairs = KeyChannelOrder::kAdjacentPairs;
constexpr KeyChannelOrder kSame = KeyChannelOrder::kSame;

// Hugging Face model_type and GGUF architecture names both appear here, so
// either source finds its row.
constexpr std::array<RopeArchitecture, 11> kTable = {{
    {"llama", "llama", "norm", kPairs},
    {"mistral", "llama", "norm", kPairs},
    {"granite", "granite", "norm", kPairs},
    {"qwen2", "qwen2", "neox", kSame},
    {"qwen2_moe", "qwen2moe", "neox", kSame},
    {"qwen3", "qwen3", "neox", kSame},
    {"qwen3_moe", "qwen3moe", "neox", kSame},
    {"phi3", "phi3", "neox", kSame},
    {"gemma", "gemma", "neox", kSame},
    {"starcoder2", "starcoder2", "neox", kSame},
    {"olmo2", "olmo2", "neox", kSame},
}};

struct Refusal {
  std::string_view name;
  std::string_view reason;
};

constexpr std::string_view kSliding = "sliding-window attention (RotatingKVCache / iSWA caches)";
constexpr std::string_view kHybrid = "hybrid or recurrent layers (state that is not a plain KV cache)";
constexpr std::string_view kLatent = "latent attention (MLA caches)";
constexpr std::string_view kMrope = "M-RoPE (multi-axis positions of a multimodal model)";
constexpr std::string_view kChunked = "chunked attention (ChunkedKVCache)";

constexpr std::array<Refusal, 37> kRefused = {{
    {"gemma2", kSliding},        {"gemma3", kSliding},          {"gemma3_text", kSliding},
    {"gemma3n", kSliding},       {"cohere2", kSliding},         {"gpt_oss", kSliding},
    {"gpt-oss", kSliding},       {"openai-moe", kSliding},      {"mistral3", kSliding},
    {"llama4", kChunked},        {"deepseek_v2", kLatent},      {"deepseek_v3", kLatent},
    {"deepseek2", kLatent},      {"deepseek_v32", kLatent},     {"minicpm3", kLatent},
    {"kimi_k2", kLatent},        {"qwen2_vl", kMrope},          {"qwen2_5_vl", kMrope},
    {"qwen2vl", kMrope},         {"qwen3_vl", kMrope},          {"qwen3vl", kMrope},
    {"qwen3_vl_moe", kMrope},    {"qwen3vlmoe", kMrope},        {"mamba", kHybrid},
    {"mamba2", kHybrid},         {"jamba", kHybrid},            {"falcon_h1", kHybrid},
    {"granitemoehybrid", kHybrid}, {"lfm2", kHybrid},           {"qwen3_next", kHybrid},
    {"qwen3next", kHybrid},      {"nemotron_h", kHybrid},       {"rwkv6", kHybrid},
    {"rwkv7", kHybrid},          {"recurrent_gemma", kHybrid},  {"plamo2", kHybrid},
    {"zamba2", kHybrid},
}};

}  // namespace

std::span<const RopeArchitecture> RopeArchitectures() { return kTable; }

Result<RopeArchitecture> LookupRopeArchitecture(std::string_view name) {
  for (const RopeArchitecture& r : kTable) {
    if (r.name == name || r.llama_cpp_name == name) return r;
  }
  for (const Refusal& r : kRefused) {
    if (r.name == name) {
      return Status::NotSupported("architecture '" + std::string(name) + "' uses " + std::string(r.reason) +
                                  ", which cannot be converted between llama.cpp and mlx-lm");
    }
  }
  std::string known;
  for (const RopeArchitecture& r : kTable) {
    if (!known.empty()) known += ", ";
    known += r.name;
  }
  return Status::NotSupported("architecture '" + std::string(name) +
                              "' is not in the RoPE pairing table (known: " + known +
                              "); its K channel order is not guessed");
}

}  // namespace kvstore
