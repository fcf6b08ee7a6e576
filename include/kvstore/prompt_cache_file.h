// Prompt-cache files: a whole prompt cache (one cache per layer) saved as a
// safetensors file laid out exactly as mlx-lm's save_prompt_cache writes it
// (or, on request, as mlx-swift-lm's savePromptCache does), so files cross
// between kvstore, mlx-lm and mlx-swift-lm in both directions
// (docs/format.md §5), with two optional extensions that never make another
// reader silently misread a file:
//   * integrity: SHA-256 digests of every tensor and of the header content,
//     stored as user metadata (1.kvstore_*) that mlx-lm returns untouched;
//   * compression: the whole file inside a seekable zstd container
//     (zstd_seekable.h); `zstd -d` gives back the plain file (the byte-plane
//     codec instead yields bytes every safetensors reader refuses), and other
//     safetensors readers refuse the compressed form loudly.
//
// Whole-file functions (SavePromptCache, LoadPromptCache, ...) sit on a
// layer-by-layer reader (PromptCacheReader) and a streaming writer (a
// LayerSource), which the conversions (ConvertPromptCacheFile,
// TrimPromptCacheFile, TranscodePromptCacheFile) use to work in bounded
// memory.
//
// Thread safety: every function is reentrant; saving and loading different
// files, and loading one file from many threads, run concurrently without a
// global lock. Loaded caches view the file's mapping (zero-copy) and copy a
// buffer only when they first write to it.
#ifndef KVSTORE_PROMPT_CACHE_FILE_H_
#define KVSTORE_PROMPT_CACHE_FILE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/digest.h"
#include "kvstore/env.h"
#include "kvstore/safetensors.h"
#include "kvstore/sha256.h"
#include "kvstore/status.h"
#include "kvstore/zstd_seekable.h"

namespace kvstore {

// Who is to read a file, and so how it is laid out (docs/format.md §5,
// docs/compat.md). The two mlx-lm layouts differ only in ArraysCache (and
// MambaCache) layers, so a file without one is the same in both and reads as
// kMlxLm.
enum class PromptCacheLayout {
  // mlx-lm's save_prompt_cache since 2026-08 (format v1): ArraysCache state
  // [slots, left_padding, lengths], tensors "i.0.k", "i.1", "i.2". mlx-lm
  // 0.31.x misreads it silently; mlx-lm since that change reads it.
  kMlxLm,
  kMlxSwiftLm,   // mlx-swift-lm's flat layout (docs/format.md §5.6)
  kMlxLmLegacy,  // the first cache_prompt format: "{i}_keys" / "{i}_values" (read only)
  // mlx-lm 0.31.x (the release `pip install mlx-lm` gives) and earlier:
  // ArraysCache state is the flat slot list, tensors "i.k"; no left_padding
  // or lengths. mlx-lm since the change refuses it loudly (except a 3-slot
  // ArraysCache, which it misreads). The default for saves (docs/compat.md
  // says why).
  kMlxLm031,
  // mlx-lm 0.32 and later (PR #1778): every class's state holds its raw
  // buffers and its scalars (offsets, sizes, flags) as tensors; metadata
  // [user, class names, scalar kinds] as "0.*", "1.*", "2.*" (docs/format.md
  // §5.9). mlx-lm 0.31 and earlier cannot read it, nor 0.32 the others.
  kMlxLm032,
};
// "mlx-lm", "mlx-swift-lm", "mlx-lm-legacy", "mlx-lm-0.31", "mlx-lm-0.32".
std::string_view LayoutName(PromptCacheLayout layout);
// The layout named `name` (LayoutName's inverse); nullopt for other names.
std::optional<PromptCacheLayout> LayoutFromName(std::string_view name);

// Metadata keys this library owns (stored under mlx-lm's user namespace "1.").
inline constexpr std::string_view kFormatKey = "kvstore_format";          // "kvstore/1"
inline constexpr std::string_view kTensorDigestsKey = "kvstore_sha256_tensors";
inline constexpr std::string_view kHeaderDigestKey = "kvstore_sha256_header";
// A file whose digests are not SHA-256 names their algorithm ("xxh3-128")
// and stores them under the two keys after it (docs/format.md §5.3).
inline constexpr std::string_view kDigestAlgorithmKey = "kvstore_digest_algorithm";
inline constexpr std::string_view kDigestTensorsKey = "kvstore_digest_tensors";
inline constexpr std::string_view kDigestHeaderKey = "kvstore_digest_header";
// An HMAC-SHA256 seal of the digests under a shared secret (docs/format.md §5.4).
inline constexpr std::string_view kHmacKey = "kvstore_hmac_sha256";
// True for the keys above (excluded from the user metadata we return).
bool IsKvstoreMetadataKey(std::string_view user_key);

// Progress of a long operation in bytes: called with (done, total) from the
// calling thread, often enough to draw a progress bar (about every 4 MiB).
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

struct SavePromptCacheOptions {
  // The reader to write for: kMlxLm031 (default; docs/compat.md says why),
  // kMlxLm032 (mlx-lm 0.32 and later), kMlxLm or kMlxSwiftLm.
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm031;
  bool integrity = true;                 // write digests
  // Their algorithm: SHA-256 for files written for exchange; XXH3-128 (at
  // memory speed, not cryptographic) for caches (the disk tier's default).
  DigestAlgorithm digest = DigestAlgorithm::kSha256;
  // kAlways: temp file, fsync, rename, directory fsync; kNone: temp file +
  // rename only (caches that verify every load: a crash costs a miss);
  // kWhenReplacing: synced only over an existing file (kvstore/env.h).
  Durability durability = Durability::kAlways;
  std::optional<int> compression_level;  // set: seekable zstd container at this level
  ZstdCodec codec = ZstdCodec::kZstd;    // with compression: plain frames or byte planes
  size_t frame_size = size_t{4} << 20;   // compressed frame size (input bytes)
  size_t alignment = 8;                  // data-section alignment of the plain file
  int threads = 0;                       // hashing/compression workers (0 = all cores)
  ProgressFn progress;                   // bytes of tensor data written
};

struct LoadPromptCacheOptions {
  bool verify = false;  // check the digests (error when a digest mismatches)
  // A compressed file with digests is checked whatever `verify` says (it is
  // decompressed whole anyway); false skips that.
  bool verify_compressed = true;
  int threads = 0;
  ParseLimits limits;
};

struct LoadedPromptCache {
  PromptCache cache;
  Metadata user_metadata;  // our kvstore_* keys excluded
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm;
  bool compressed = false;
  bool has_digests = false;
  DigestAlgorithm digest_algorithm = DigestAlgorithm::kSha256;  // of the digests, when has_digests
  bool verified = false;   // digests checked and matched
};

// Saves atomically (temp file, fsync, rename; the fsyncs as
// options.durability says). Errors: InvalidArgument for a
// cache the layout's loader cannot read (mlx-lm: an empty KVCache, a None
// ArraysCache slot, a user key that is empty, contains '.' or is an
// integer), NotSupported for what the layout lacks (mlx-swift-lm has no
// batch caches; mlx-lm 0.31 stores no ArraysCache left_padding or lengths),
// and the Env's errors; the old file is then left untouched.
// Plain files are hashed while they are written; the header, whose digests
// are fixed-length, is written last into the space reserved for it.
Status SavePromptCache(Env* env, const std::string& path, const PromptCache& cache,
                       const Metadata& user_metadata, const SavePromptCacheOptions& options = {});

// Produces layer `index` of a cache being saved. A streaming save calls it
// once to plan the header and again when the layer's data is written (more
// than once when the layer's tensors have different element sizes), so a
// conversion holds about one layer in memory. It must return the same
// content every time.
using LayerSource = std::function<Result<std::shared_ptr<const Cache>>(size_t index)>;
Status SavePromptCache(Env* env, const std::string& path, size_t num_layers, const LayerSource& source,
                       const Metadata& user_metadata, const SavePromptCacheOptions& options = {});

// Loads a prompt cache. Corruption for malformed files (naming the rule; an
// impossible layer is found from the header, PromptCacheReader::Validate,
// before any layer is built), NotSupported for what we recognise but cannot
// read (mlx-lm's v2 layout, an unknown class name, mlx-swift-lm model
// state), NotFound for a missing file.
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
  std::string class_name;  // as written in the file
  MetaState meta_state;    // as written in the file
  std::optional<int64_t> offset;  // the cache's offset after load; none for classes without one
  std::vector<LayerTensor> tensors;
  std::vector<LayerInfo> children;  // CacheList children
  // Why a well-formed layer cannot be loaded (an unknown class, a class only
  // mlx-swift-lm has); empty when it can.
  std::string unsupported;
  // Why the layer is impossible, from the header alone (see
  // PromptCacheReader::Validate): the rule of its class that the meta_state
  // or the tensors' count, rank, dtype or shape break, e.g. "RotatingKVCache:
  // meta_state needs max_size >= 1 and 0 <= keep <= max_size, got keep 40,
  // max_size 32". Empty for a well-formed layer.
  std::vector<std::string> errors;
};

struct CompressionInfo {
  std::string codec = "zstd";  // "zstd" or "zstd-byteplane"
  uint64_t frames = 0;
  uint64_t compressed_bytes = 0;
};

struct PromptCacheInfo {
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm;
  uint64_t file_bytes = 0;
  uint64_t tensor_bytes = 0;  // uncompressed payload
  std::optional<CompressionInfo> compression;
  bool has_digests = false;
  DigestAlgorithm digest_algorithm = DigestAlgorithm::kSha256;  // of the digests, when has_digests
  Metadata user_metadata;  // kvstore_* keys excluded
  std::vector<LayerInfo> layers;
  std::string unsupported;  // why the file cannot be loaded; empty when it can
  SafetensorsHeader header;  // of the (decompressed) safetensors file
  // Which mlx-lm releases load the file as it is (docs/compat.md): 0.31 and
  // earlier (the layouts before 0.32 without ArraysCache padding), 0.32 and
  // later (kMlxLm032). Both false for an invalid or unsupported file.
  bool loads_in_mlx_lm_031 = false;
  bool loads_in_mlx_lm_032 = false;
  // What a loader of either mlx-lm layout would do wrong without an error
  // (load [] or misread layers), one sentence each; empty when every loader
  // that cannot read the file fails loudly.
  std::vector<std::string> mlx_lm_warnings;

  // True when no layer has errors (an unsupported layer is well formed).
  bool valid() const;
  // The largest offset of any layer or CacheList child: the tokens the
  // cache holds. nullopt when no layer has an offset.
  std::optional<int64_t> tokens() const;
  // "safetensors", or "safetensors+<codec>" for a compressed file.
  std::string format() const;
  // "<= 0.31", ">= 0.32", "any" or "neither" (loads_in_mlx_lm_031/032).
  std::string mlx_lm_versions() const;
};

Result<PromptCacheInfo> ReadPromptCacheInfo(Env* env, const std::string& path,
                                            const ParseLimits& limits = {});

// Options that write a file in the layout and container `info` describes,
// so a conversion keeps its input's mlx-lm version (the legacy layout, which
// is read-only and holds only KVCaches, becomes mlx-lm; levels are not
// recorded, so a compressed file gets the codec's default: 3 for zstd, 1 for
// byte planes), with digests (of the input's algorithm when it has digests,
// else SHA-256).
SavePromptCacheOptions SameFormatAs(const PromptCacheInfo& info);

// ---- Verification ----

// One failed digest check (docs/format.md §5.4).
struct DigestMismatch {
  std::string tensor;  // the tensor's name; empty for the header
  // The stored digest; nullopt when the file stores none for the tensor, or
  // its digest entries cannot be read.
  std::optional<Digest> expected;
  // The digest of the bytes; nullopt for a stored digest of a tensor the
  // file does not hold.
  std::optional<Digest> found;

  // The one message every front end prints for it (kvtool verify, kvtool
  // inspect --verify, the Python package, verified loads and conversions),
  // naming the algorithm ("SHA-256" or "XXH3-128"):
  //   "<path>: tensor '0.1': SHA-256 mismatch: expected 5f70bf18a0860070...,
  //    found 9f3e2d1c0b4a5968..."
  // Digests are shortened to their first 16 hex digits; "the header"
  // replaces the tensor; a missing digest reads "(no valid digest stored)",
  // a missing tensor "(no such tensor)".
  std::string Message(std::string_view path) const;
};

struct VerifyReport {
  bool has_digests = false;
  std::vector<DigestMismatch> mismatches;  // the header first, then tensors in header order
  uint64_t bytes_hashed = 0;
  bool ok() const { return has_digests && mismatches.empty(); }

  // What the verification of the file at `path` amounts to: OK when ok();
  // FailedPrecondition "<path>: the file carries no digests to verify"
  // without digests; else Corruption whose message is the mismatches'
  // Messages, one per line (at most 8, then "<path>: N more digest
  // mismatches").
  Status ToStatus(std::string_view path) const;
};

// PromptCacheReader::Validate of the file at `path`: reads the header (for a
// compressed file, only the frames holding it) and checks every layer
// without reading a tensor byte. Open's errors (an unreadable header, an
// unknown layout) are returned as they are.
Status ValidatePromptCacheFile(Env* env, const std::string& path, const ParseLimits& limits = {});

// Hashes every tensor (in parallel) and compares with the stored digests.
// A file without digests gives has_digests == false (not an error).
Result<VerifyReport> VerifyPromptCacheFile(Env* env, const std::string& path, int threads = 0,
                                           const ProgressFn& progress = {});

// ---- Reading layer by layer ----

// An opened prompt-cache file whose layers are built on demand: a plain file
// is mapped and its layers view the mapping; a compressed file decompresses
// only the frames holding the requested layer. Immutable after Open: every
// member may be called from many threads at once.
class PromptCacheReader {
 public:
  struct Options {
    ParseLimits limits;
    // Compressed files: decompress everything at Open (all cores) instead of
    // layer by layer. Faster for loading a whole cache; uses its size in memory.
    bool decompress_at_open = false;
    // Plain files: populate a layer's pages when it is read (one system call
    // instead of a page fault per page). Faster when every byte will be read
    // (conversions); loads leave it off so that untouched bytes cost nothing.
    bool prefetch = false;
    int threads = 0;
  };
  // Reads the header (for a compressed file, only the frames holding it).
  // Errors as LoadPromptCache's for the layout; tensors are not touched.
  static Result<std::unique_ptr<PromptCacheReader>> Open(Env* env, const std::string& path,
                                                         const Options& options);
  static Result<std::unique_ptr<PromptCacheReader>> Open(Env* env, const std::string& path) {
    return Open(env, path, Options{});
  }
  ~PromptCacheReader();

  const PromptCacheInfo& info() const;
  size_t num_layers() const;
  const std::string& path() const;

  // Header-only validation, done at Open: OK when every layer can be built
  // as far as the header tells (the class is known; the meta_state parses
  // and is in range; tensor count, rank, dtype and shape agree with the
  // class and with each other); otherwise exactly what ReadLayer returns for
  // the first impossible layer, "<path>: layer i (<class>): <rule>"
  // (Corruption), or else for the first it cannot load (NotSupported). Only
  // checks on tensor values are left to ReadLayer. Reads no tensor byte.
  Status Validate() const;

  // Builds layer `index`. With `verify`, first checks the header and this
  // layer's tensors against the stored digests: Corruption naming the tensor
  // on a mismatch, FailedPrecondition when the file has no digests.
  // REQUIRES: index < num_layers().
  Result<std::shared_ptr<Cache>> ReadLayer(size_t index, bool verify = false) const;

  // Hashes every tensor (in parallel) and compares with the stored digests.
  Result<VerifyReport> Verify(int threads = 0, const ProgressFn& progress = {}) const;

  // ---- Checking another reader's copy ----
  // A caller may check the header here and then let another reader (MLX's
  // own loader, reading by path) read the file into memory of its own. The
  // file may have been replaced or rewritten in between, so what that reader
  // returns is served only when it passes these checks.

  // One tensor as the other reader returned it. `bytes`: its elements in
  // row-major order (may be empty for SameHeader, which reads no byte).
  struct TensorCopy {
    std::string_view name;
    DType dtype = DType::kF16;
    Shape shape;
    std::span<const std::byte> bytes;
  };
  // True when `metadata` (in any order) and `tensors` (by name, in any order)
  // are exactly the header checked at Open: every metadata entry, tensor name,
  // dtype and shape. False for another file.
  bool SameHeader(const Metadata& metadata, std::span<const TensorCopy> tensors) const;
  // Hashes the copies (on up to `threads` threads of the shared pool, 0 for
  // all cores) and checks them and the header against the stored digests,
  // with the errors of a verified load: FailedPrecondition without digests,
  // Corruption with the first mismatch's Message. Checks what the copies
  // hold, so the bytes served are exactly the bytes verified.
  // REQUIRES: SameHeader(metadata, tensors) for the copies' metadata.
  Status VerifyCopy(std::span<const TensorCopy> tensors, int threads = 0) const;

 private:
  struct Impl;
  friend struct PromptCacheReaderInternals;  // the library's conversion code
  explicit PromptCacheReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- Converting files ----

struct ConvertOptions {
  SavePromptCacheOptions output;  // layout, integrity and compression of the output
  // When the input has digests, check the bytes used against them: tensors
  // copied unchanged are checked as they are written, the others when read.
  // A mismatch fails the conversion (Corruption naming the input tensor)
  // and leaves the output untouched.
  bool verify_input = true;
  // Applied to every layer after it is read (quantize, cast, trim...); may
  // return the layer itself. Called again when the save needs the layer
  // again: must be deterministic.
  std::function<Result<std::shared_ptr<Cache>>(size_t index, std::shared_ptr<Cache> layer)> transform;
  int threads = 0;
};

// Re-writes `in` as `out` layer by layer with bounded memory (about one
// layer plus the compression frames in flight), in `options.output.layout`
// (SameFormatAs keeps the input's). A file with an impossible or
// unsupported layer is refused before anything is written (as Validate).
// `out` may equal `in`: the input stays mapped and is replaced atomically
// at the end.
Status ConvertPromptCacheFile(Env* env, const std::string& in, const std::string& out,
                              const ConvertOptions& options);

// mlx-lm's trim_prompt_cache on a file: drops the last `n` tokens of every
// layer, streaming like ConvertPromptCacheFile (`options.transform`, if set,
// runs after the trim). Returns the first layer's trimmed count. Unlike
// trim_prompt_cache, which silently does nothing, a layer that is not
// trimmable is NotSupported naming it, and OUT is left untouched.
Result<int64_t> TrimPromptCacheFile(Env* env, const std::string& in, const std::string& out, int64_t n,
                                    const ConvertOptions& options = {});

struct TranscodeOptions {
  std::optional<int> compression_level;  // unset: a plain safetensors file
  ZstdCodec codec = ZstdCodec::kZstd;
  size_t frame_size = size_t{4} << 20;
  int threads = 0;
  ProgressFn progress;  // bytes of the plain file written or compressed
  Durability durability = Durability::kAlways;
};

// Changes only the container of `in` (plain, zstd, byte-plane zstd): the
// plain file inside is copied byte for byte, so compressing and then
// decompressing gives back the input exactly. Streams frame by frame on all
// cores (decompression is pipelined with the writes). Does not check
// digests (use VerifyPromptCacheFile); refuses a file with an impossible
// layer (Corruption, as Validate), copies one with a layer kvstore cannot
// load. `out` may equal `in`.
Status TranscodePromptCacheFile(Env* env, const std::string& in, const std::string& out,
                                const TranscodeOptions& options);

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_FILE_H_
