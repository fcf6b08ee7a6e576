// The prompt-cache metadata that travels with a converted cache: "tokens"
// (a JSON list, spelled as Python's json.dumps writes it, as mlx-lm's tools
// store it) and "llama_cpp" (the llama.cpp settings the cache came from).
#ifndef KVSTORE_LIBKVSTORE_ENGINES_LLAMA_METADATA_H_
#define KVSTORE_LIBKVSTORE_ENGINES_LLAMA_METADATA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/llama_cpp.h"

namespace kvstore::engines {

// "[1, 2, 3]"
std::string TokenListJson(const std::vector<int32_t>& tokens);

// {"k_type":"f16","v_type":"f16","flash_attn":true,"n_stream":1,"stream":0,"seq_id":0}
std::string LlamaTargetJson(const LlamaTarget& target);

// Fills the unset fields of `options` from a "llama_cpp" metadata value.
// The recorded stream and sequence id apply only when n_stream is taken from
// it too; then the sequence id is returned. InvalidArgument naming the field
// when the value is malformed.
Result<std::optional<int32_t>> ApplyLlamaTargetJson(std::string_view json_text, PromptCacheToLlamaOptions& options);

}  // namespace kvstore::engines

#endif  // KVSTORE_LIBKVSTORE_ENGINES_LLAMA_METADATA_H_
