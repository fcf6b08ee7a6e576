// kvtool's llama.cpp support: inspecting sequence-state files and converting
// between them and prompt-cache files (docs/cli.md, docs/llama-cpp.md).
// inspect.cc and convert.cc call in here when a file or flag is llama.cpp's.
#ifndef KVSTORE_APPS_KVTOOL_LLAMA_H_
#define KVSTORE_APPS_KVTOOL_LLAMA_H_

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kvstore/cache.h"
#include "kvstore/dtype.h"
#include "kvstore/zstd_seekable.h"

namespace kvtool {

// True when `path` starts with the ggsq magic (a missing file is false).
bool IsLlamaStateFile(const std::string& path);

// kvtool inspect on a ggsq file: human table or --json.
int InspectLlamaState(const std::string& path, bool json, bool verify);

// The llama.cpp flags of `kvtool convert`.
struct LlamaConvertArgs {
  std::string model;       // --model PATH
  std::string kv_type;     // --kv-type f16|bf16|f32
  std::string flash_attn;  // --flash-attn on|off
  std::optional<uint32_t> n_stream, stream;
  std::string tokens;      // --tokens FILE
  bool any() const { return !kv_type.empty() || !flash_attn.empty() || n_stream || stream; }
};
std::shared_ptr<LlamaConvertArgs> AddLlamaConvertOptions(CLI::App* convert);

// What convert.cc has parsed that a llama.cpp conversion uses.
struct LlamaConvertRequest {
  std::string in, out, to;
  std::optional<kvstore::DType> dtype;  // --dtype
  int quantize_bits = 0;                // --quantize BITS
  bool dequantize = false;              // --dequantize
  // --quantize / --dequantize / --dtype for each layer; null when none.
  std::function<kvstore::Result<std::shared_ptr<kvstore::Cache>>(std::shared_ptr<kvstore::Cache>)> transform;
  std::optional<int> compression_level;  // unset: a plain file
  kvstore::ZstdCodec codec = kvstore::ZstdCodec::kZstd;
  bool container_flags = false;          // --compress, --decompress or --codec given
  bool integrity = true, integrity_flags = false;
  kvstore::DigestAlgorithm digest = kvstore::DigestAlgorithm::kSha256;
  int threads = 0;
  bool quiet = false;
  kvstore::Durability durability = kvstore::Durability::kWhenReplacing;  // of a prompt-cache output
};

// Runs the conversion when IN is a ggsq file or --to is llama.cpp, and
// refuses llama.cpp flags on other conversions; nullopt when neither applies.
std::optional<int> MaybeRunLlamaConvert(const LlamaConvertRequest& request, const LlamaConvertArgs& llama);

}  // namespace kvtool

#endif  // KVSTORE_APPS_KVTOOL_LLAMA_H_
