// How a PromptCacheStore lays out its directory: the file name a key is
// stored under, the metadata keys that hold the key inside the file, and
// the MANIFEST lines that let Open index files without reading them.
#ifndef KVSTORE_LIBKVSTORE_TIERS_STORE_FORMAT_H_
#define KVSTORE_LIBKVSTORE_TIERS_STORE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvstore/safetensors.h"
#include "kvstore/status.h"
#include "libkvstore/tiers/prefix_hash.h"
#include "libkvstore/util/token_text.h"

namespace kvstore {

// The key an entry is stored under: a model key and a token prefix.
using StoreKey = PrefixKey;

// The user metadata key holding the model fingerprint's canonical JSON
// (absent in files of caches that have none, e.g. an empty KVCache).
inline constexpr std::string_view kStoreFingerprintKey = "kvstore_fingerprint";

inline constexpr std::string_view kStoreFileSuffix = ".safetensors";

// A delta entry holds only the rows of tokens [n, L) of its key; rows
// [0, n) are those of its base, a whole entry of the same directory, model
// key and fingerprint whose key starts with the same n tokens. The value is
// "<base file> <n>". (A base replaced by a new file of its key still
// serves: the same tokens of the same model configuration have the same
// KV, as the shared tier's chunks from different writers do.)
inline constexpr std::string_view kStoreBaseKey = "kvstore_base";

struct StoreBase {
  std::string file;
  int64_t tokens = 0;  // n
};
std::string StoreBaseText(const StoreBase& base);
// The base a file's metadata names: nullopt for a whole entry, Corruption
// when the value is malformed (a file name that is not a store entry's, n
// < 1).
Result<std::optional<StoreBase>> StoreBaseFromMetadata(const Metadata& metadata);
bool IsStoreEntryFileName(std::string_view name);

// "<16 hex digits of SHA-256(model '\n' tokens)>.safetensors".
std::string StoreFileName(std::string_view model, std::span<const int32_t> tokens);

// StoreFileName(model, tokens.first(n)) for n = 1 .. tokens.size(), as
// out[n - 1], in one pass over the tokens.
std::vector<std::string> StoreFileNamesOfPrefixes(std::string_view model, std::span<const int32_t> tokens);
// True for a temp file of the store's own writes: "<entry name>.kvtmp-..."
// (a Put's staged file, and the atomic writer's temp file of it), the
// manifest's "MANIFEST.kvtmp-...", and "kvstore-models.json.kvtmp-..." (the
// Python tiers keep their models file in the store's directory). Several
// processes share a directory: such a file is a leftover only when the
// process its name gives (TempFileWriterPid) is gone.
bool IsStoreTempFileName(std::string_view name);

// The value of user metadata `key`; nullopt when absent.
std::optional<std::string_view> FindUserKey(const Metadata& metadata, std::string_view key);

// The user metadata that records the key in the entry's file.
Metadata StoreKeyMetadata(std::string_view model, std::span<const int32_t> tokens);
// The key recorded in a file's user metadata; nullopt when a key is missing
// or the tokens are not a comma-separated list of int32 values.
std::optional<StoreKey> StoreKeyFromMetadata(const Metadata& metadata);

// MANIFEST: an append-only log, one line per change:
//   "+ <file> <bytes> <model as hex, or '-'> <tokens, comma-separated, or '-'> <fingerprint digest, or '-'>[ <base file>]\n"
//   "- <file>\n"
// ("+" lines without the last field, from before fingerprints, are read as
// entries without one.)
std::string ManifestAddLine(std::string_view file, int64_t bytes, std::string_view model,
                            std::span<const int32_t> tokens, std::string_view fingerprint,
                            std::string_view base = {});
std::string ManifestRemoveLine(std::string_view file);

struct ManifestEntry {
  StoreKey key;
  int64_t bytes = 0;
  std::string fingerprint{};  // hex digest; empty when the file records none
  std::string base{};         // a delta entry's base file; empty for a whole entry
};
// One line of the log: `entry` set for a "+" line, unset for a "-" line.
struct ManifestChange {
  std::string file;
  std::optional<ManifestEntry> entry;
};
// The changes of the whole lines in `data`, in order; `*used` gets the
// bytes they span (a torn last line is left for a later read). Malformed
// lines (and "#" lines: a compacted manifest's first line names it) are
// skipped: the manifest is a hint, and every file it names is checked
// against it before it is served.
std::vector<ManifestChange> ParseManifestChanges(std::span<const std::byte> data, size_t* used);
// The entries a manifest lists (file name -> last "+" line not removed
// since); `*used` as for ParseManifestChanges.
std::unordered_map<std::string, ManifestEntry> ReadManifest(std::span<const std::byte> data,
                                                            size_t* used = nullptr);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_STORE_FORMAT_H_
