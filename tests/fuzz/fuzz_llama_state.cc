// ParseLlamaState must never crash or over-allocate on any bytes. A file it
// accepts describes data inside the file, and writing it back with those
// bytes reproduces the input exactly; when its cells form one sequence, it
// converts to a prompt cache.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kvstore/llama_cpp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto st = kvstore::ParseLlamaState(bytes);
  if (!st.ok()) return 0;
  if (st->FileBytes() != size) std::abort();
  auto status = kvstore::SaveLlamaState(env.get(), "/out.ggsq", *st, [&](size_t s, size_t l, bool value) {
    const auto& stream = st->streams[s];
    const auto& layer = stream.layers[l];
    const uint64_t n = value ? kvstore::LlamaState::VBytes(stream, layer) : kvstore::LlamaState::KBytes(stream, layer);
    const uint64_t at = value ? layer.v_offset : layer.k_offset;
    if (at + n > size) std::abort();
    return kvstore::Result<std::span<const std::byte>>(bytes.subspan(at, n));
  });
  if (!status.ok()) std::abort();
  auto out = env->OpenReadable("/out.ggsq");
  if (!out.ok() || (*out)->size() != size || std::memcmp((*out)->data().data(), data, size) != 0) std::abort();
  auto seq = kvstore::FindLlamaSequence(*st);
  if (!seq.ok()) return 0;
  // A model that fits the first non-empty stream, so the conversion runs.
  const auto& stream = st->streams[seq->stream];
  kvstore::LlamaModelInfo model;
  model.source = "fuzz";
  model.rope = kvstore::LookupRopeArchitecture(size % 2 ? "llama" : "qwen2").value();
  model.n_layer = static_cast<int64_t>(stream.layers.size());
  model.n_head = model.n_head_kv = 1;
  model.head_dim_k = stream.layers[0].n_embd_k;
  model.head_dim_v = stream.layers[0].n_embd_v;
  model.rope_dims = model.head_dim_k;
  if (!kvstore::WriteStringAtomic(env.get(), "/in.ggsq", bytes).ok()) return 0;
  (void)kvstore::ConvertLlamaStateToPromptCache(env.get(), "/in.ggsq", "/out.safetensors", model);
  return 0;
}
