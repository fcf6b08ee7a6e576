// Header-only validation (ValidatePromptCacheFile) on arbitrary headers: the
// input is the JSON header of a plain prompt-cache file whose data section
// (zeros) is sized to what the header declares, so most inputs reach the
// layout and layer checks. Never crashes, and agrees with a load: a file
// whose layers all pass loads (the data is zeros, so nothing the header
// cannot tell fails), and a file that loads passes.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "kvstore/env.h"
#include "kvstore/json.h"
#include "kvstore/prompt_cache_file.h"

namespace {

// The end of the data section the header declares (the largest offset).
uint64_t DeclaredDataSize(std::string_view header) {
  auto json = kvstore::Json::Parse(header);
  if (!json.ok() || !json->is_object()) return 0;
  uint64_t end = 0;
  for (const auto& [name, entry] : json->as_object()) {
    const kvstore::Json* offsets = entry.is_object() ? entry.Find("data_offsets") : nullptr;
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2) continue;
    const kvstore::Json& e = offsets->as_array()[1];
    if (e.is_integer() && e.as_int() > 0) end = std::max<uint64_t>(end, static_cast<uint64_t>(e.as_int()));
  }
  return std::min<uint64_t>(end, uint64_t{1} << 20);  // larger files are not worth the fuzzer's time
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  const std::string_view header(reinterpret_cast<const char*>(data), size);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((uint64_t{size} >> (8 * i)) & 0xff);
  file.append(header);
  file.append(DeclaredDataSize(header), '\0');
  if (!kvstore::WriteStringAtomic(env.get(), "/f.safetensors", std::as_bytes(std::span(file))).ok()) return 0;
  const kvstore::Status valid = kvstore::ValidatePromptCacheFile(env.get(), "/f.safetensors");
  auto info = kvstore::ReadPromptCacheInfo(env.get(), "/f.safetensors");
  kvstore::LoadPromptCacheOptions options;
  options.threads = 1;
  const auto loaded = kvstore::LoadPromptCache(env.get(), "/f.safetensors", options);
  if (valid.ok() != loaded.ok()) std::abort();
  if (info.ok() && !info->valid() && valid.code() != kvstore::StatusCode::kCorruption) std::abort();
  return 0;
}
