// The prompt-cache readers (plain, zstd and byte-plane containers; mlx-lm,
// mlx-lm 0.32, legacy and mlx-swift-lm layouts) must never crash or over-allocate on any
// bytes: whole loads (with and without verification), layer-by-layer reads
// of the streaming reader, header-only validation, the conversions built on
// it, and the naming of files of other kinds (RecognizeFileKind, asked when an
// open fails). A loaded cache must be usable; a layer validation refuses never
// loads.
#include <cstdlib>
#include <memory>

#include "kvstore/env.h"
#include "kvstore/file_kind.h"
#include "kvstore/prompt_cache_file.h"

namespace {

void Use(const kvstore::Cache& layer) {
  (void)layer.State();
  (void)layer.FullState();
  (void)layer.Nbytes();
  (void)layer.meta_state();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (!kvstore::WriteStringAtomic(env.get(), "/f.safetensors", bytes).ok()) return 0;
  (void)kvstore::NotSafetensorsMessage("/f", kvstore::RecognizeFileKind(bytes));
  (void)kvstore::ReadPromptCacheInfo(env.get(), "/f.safetensors");
  kvstore::LoadPromptCacheOptions options;
  options.verify = size % 2 == 0;
  options.threads = 1;
  auto loaded = kvstore::LoadPromptCache(env.get(), "/f.safetensors", options);
  if (loaded.ok()) {
    for (const auto& layer : loaded->cache) Use(*layer);
  }
  // The streaming reader decompresses only the frames a layer needs.
  kvstore::PromptCacheReader::Options open;
  open.threads = 1;
  auto reader = kvstore::PromptCacheReader::Open(env.get(), "/f.safetensors", open);
  if (!reader.ok()) return 0;
  // A layer the header-only validation finds impossible is never built.
  const kvstore::PromptCacheInfo& info = (*reader)->info();
  (void)kvstore::ValidatePromptCacheFile(env.get(), "/f.safetensors");
  for (size_t i = 0; i < (*reader)->num_layers(); ++i) {
    auto layer = (*reader)->ReadLayer(i, size % 3 == 0);
    if (layer.ok() && !info.layers[i].errors.empty()) std::abort();
    if (layer.ok()) Use(**layer);
  }
  (void)(*reader)->Verify(1);
  kvstore::ConvertOptions convert;
  convert.threads = 1;
  convert.output.layout = size % 5 == 0   ? kvstore::PromptCacheLayout::kMlxSwiftLm
                           : size % 5 == 1 ? kvstore::PromptCacheLayout::kMlxLm032
                                           : kvstore::PromptCacheLayout::kMlxLm;
  (void)kvstore::ConvertPromptCacheFile(env.get(), "/f.safetensors", "/out.safetensors", convert);
  kvstore::TranscodeOptions transcode;
  transcode.threads = 1;
  (void)kvstore::TranscodePromptCacheFile(env.get(), "/f.safetensors", "/out.safetensors", transcode);
  return 0;
}
