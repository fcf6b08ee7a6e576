// LoadPromptCache (plain and zstd-compressed, with verification) must never
// crash or over-allocate on any bytes; a loaded cache must be usable.
#include <memory>

#include "kvstore/env.h"
#include "kvstore/prompt_cache_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (!kvstore::WriteStringAtomic(env.get(), "/f.safetensors", bytes).ok()) return 0;
  (void)kvstore::ReadPromptCacheInfo(env.get(), "/f.safetensors");
  kvstore::LoadPromptCacheOptions options;
  options.verify = size % 2 == 0;
  options.threads = 1;
  auto loaded = kvstore::LoadPromptCache(env.get(), "/f.safetensors", options);
  if (!loaded.ok()) return 0;
  for (const auto& layer : loaded->cache) {
    (void)layer->State();
    (void)layer->Nbytes();
    (void)layer->meta_state();
  }
  return 0;
}
