// The model-description parsers (GGUF metadata, config.json) must never
// crash or over-allocate on any bytes, and what they accept is consistent.
#include <cstdlib>

#include "kvstore/llama_model.h"

namespace {

void Check(const kvstore::Result<kvstore::LlamaModelInfo>& m) {
  if (!m.ok()) return;
  if (m->n_layer <= 0 || m->n_head_kv <= 0 || m->head_dim_k <= 0 || m->head_dim_v <= 0 ||
      m->n_head % m->n_head_kv != 0 || m->rope_dims > m->head_dim_k) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  Check(kvstore::ParseGgufModel(bytes));
  Check(kvstore::ParseHfConfig(std::string_view(reinterpret_cast<const char*>(data), size)));
  return 0;
}
