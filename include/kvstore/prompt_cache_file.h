// Prompt-cache files: a whole prompt cache (one cache per layer) saved as a
// safetensors file laid out exactly as mlx-lm's save_prompt_cache writes it,
// so files cross between kvstore and mlx-lm in both directions
// (docs/format.md §5), with two optional extensions that never make another
// reader silently misread a file:
//   * integrity: SHA-256 digests of every tensor and of the header content,
//     stored as user metadata (1.kvstore_*) that mlx-lm returns untouched;
//   * compression: the whole file inside a seekable zstd container
//     (zstd_seekable.h); `zstd -d` gives back the plain file, and other
//     safetensors readers refuse the compressed form loudly.
//
// Thread safety: every function is reentrant; saving and loading different
// files, and loading one file from many threads, run concurrently without a
// global lock. Loaded caches view the file's mapping (zero-copy) and copy a
// buffer only when they first write to it.
#ifndef KVSTORE_PROMPT_CACHE_FILE_H_
#define KVSTORE_PROMPT_CACHE_FILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/env.h"
#include "kvstore/safetensors.h"
#include "kvstore/status.h"

namespace kvstore {

enum class PromptCacheLayout {
  kMlxLm,        // mlx-lm's save_prompt_cache (format v1)
  kMlxSwiftLm,   // mlx-swift-lm's flat layout (detected; see docs/format.md §5.6)
  kMlxLmLegacy,  // the first cache_prompt format: "{i}_keys" / "{i}_values"
};
std::string_view LayoutName(PromptCacheLayout layout);  // "mlx-lm", "mlx-swift-lm", "mlx-lm-legacy"

// Metadata keys this library owns (stored under mlx-lm's user namespace "1.").
inline constexpr std::string_view kFormatKey = "kvstore_format";          // "kvstore/1"
inline constexpr std::string_view kTensorDigestsKey = "kvstore_sha256_tensors";
inline constexpr std::string_view kHeaderDigestKey = "kvstore_sha256_header";
// True for the keys above (excluded from the user metadata we return).
bool IsKvstoreMetadataKey(std::string_view user_key);

struct SavePromptCacheOptions {
  bool integrity = true;                 // write SHA-256 digests
  std::optional<int> compression_level;  // set: seekable zstd container at this level
  size_t frame_size = size_t{4} << 20;   // compressed frame size (input bytes)
  size_t alignment = 8;                  // data-section alignment of the plain file
  int threads = 0;                       // hashing/compression workers (0 = all cores)
};

struct LoadPromptCacheOptions {
  bool verify = false;  // check the SHA-256 digests (error when a digest mismatches)
  int threads = 0;
  ParseLimits limits;
};

struct LoadedPromptCache {
  PromptCache cache;
  Metadata user_metadata;  // our kvstore_* keys excluded
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm;
  bool compressed = false;
  bool has_digests = false;
  bool verified = false;   // digests checked and matched
};

// Saves atomically (temp file, fsync, rename). Errors: InvalidArgument for a
// cache mlx-lm cannot save (an empty KVCache, a None ArraysCache slot, a
// user key that would break mlx-lm's loader: empty, containing '.', or an
// integer), and the Env's errors; the old file is then left untouched.
Status SavePromptCache(Env* env, const std::string& path, const PromptCache& cache,
                       const Metadata& user_metadata, const SavePromptCacheOptions& options = {});

// Loads a prompt cache. Corruption for malformed files (naming the rule),
// NotSupported for a layout we recognise but cannot read (e.g. mlx-lm's v2),
// NotFound for an unknown class name.
Result<LoadedPromptCache> LoadPromptCache(Env* env, const std::string& path,
                                          const LoadPromptCacheOptions& options = {});

// ---- Inspection (reads the header only) ----

struct LayerTensor {
  std::string name;  // the full tensor name, e.g. "3.0.1"
  DType dtype = DType::kF16;
  Shape shape;
  uint64_t nbytes = 0;
};

struct LayerInfo {
  size_t index = 0;
  std::string class_name;
  MetaState meta_state;
  std::vector<LayerTensor> tensors;
  std::vector<LayerInfo> children;  // CacheList children
};

struct CompressionInfo {
  std::string codec = "zstd";
  uint64_t frames = 0;
  uint64_t compressed_bytes = 0;
};

struct PromptCacheInfo {
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm;
  uint64_t file_bytes = 0;
  uint64_t tensor_bytes = 0;  // uncompressed payload
  std::optional<CompressionInfo> compression;
  bool has_digests = false;
  Metadata user_metadata;  // kvstore_* keys excluded
  std::vector<LayerInfo> layers;
  SafetensorsHeader header;  // of the (decompressed) safetensors file
};

Result<PromptCacheInfo> ReadPromptCacheInfo(Env* env, const std::string& path,
                                            const ParseLimits& limits = {});

// ---- Verification ----

struct VerifyReport {
  bool has_digests = false;
  std::vector<std::string> mismatches;  // "header" or tensor names
  uint64_t bytes_hashed = 0;
  bool ok() const { return has_digests && mismatches.empty(); }
};

// Hashes every tensor (in parallel) and compares with the stored digests.
// A file without digests gives has_digests == false (not an error).
Result<VerifyReport> VerifyPromptCacheFile(Env* env, const std::string& path, int threads = 0);

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_FILE_H_
