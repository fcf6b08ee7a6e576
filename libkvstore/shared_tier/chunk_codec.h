// The shared tier's values (docs/format.md §8.4, §8.6): each is a
// prompt-cache file (mlx-lm layout, optionally zstd) whose layers are the
// pieces of the chunk's leaves and whose user metadata says which chunk it
// is. Unsealed, the file carries XXH3-128 digests; in a sealed namespace it
// carries none and is encrypted whole with AES-256-GCM (sealed_value.h),
// whose tag authenticates every byte.
//
// Decoding treats the value as hostile and checks it against what was
// asked before anything is used: the envelope (sealed namespaces), the
// format, kind, namespace, chain position, chain hashes and tokens, every
// layer's class, dtypes and shapes as the header declares them (so no
// tensor byte is decompressed or hashed for a value larger than its
// chunk), the digests, and every piece built against the leaf's spec.
// Thread-safe (pure functions).
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_CODEC_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_CODEC_H_

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/digest.h"
#include "kvstore/safetensors.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "libkvstore/shared_tier/chunk_layout.h"

namespace kvstore {

inline constexpr std::string_view kChunkFormat = "kvstore-chunk/2";

// What a chunk value says about itself (its user metadata).
struct ChunkHeader {
  ChunkKind kind = ChunkKind::kRows;
  std::string ns_digest;  // 64 hex digits
  int64_t index = 0;      // chain position i: rows [iC, (i+1)C), or a snapshot at (i+1)C
  int64_t chunk_tokens = 0;
  std::vector<int32_t> tokens;  // the chunk's own tokens [iC, (i+1)C)
  std::string chain;            // H_i, 64 hex digits
  std::string parent;           // H_{i-1}; empty for i == 0
  std::vector<std::string> layers;  // leaf path of each file layer
  std::string writer;           // who wrote it (informational)
};

Metadata ChunkHeaderMetadata(const ChunkHeader& header);
// Corruption naming the missing or malformed key.
Result<ChunkHeader> ChunkHeaderFromMetadata(const Metadata& metadata);

struct ChunkEncodeOptions {
  // The value's namespace: when it is sealed, the value is encrypted under
  // its value key, bound to the key name and N, and carries no digests.
  const ChunkNamespace* ns = nullptr;
  std::optional<int> compression_level;
  // The digests of an unsealed value: XXH3-128 (what catches corruption at
  // memory speed).
  DigestAlgorithm digest = DigestAlgorithm::kXxh3_128;
};

// The value of `header` with one file layer per piece (in header.layers
// order), sealed to `key` in a sealed namespace.
Result<std::string> EncodeChunk(const std::string& key, const ChunkHeader& header,
                                const std::vector<std::shared_ptr<const Cache>>& pieces,
                                const ChunkEncodeOptions& options);

// Why a value was refused.
enum class ChunkFault {
  kCorrupt,     // unreadable, or bytes that disagree with its digests
  kForged,      // in a sealed namespace: no envelope, or one that does not verify
  kMismatched,  // a readable chunk, but not the one asked for
};

struct ChunkRequest {
  std::string key;
  ChunkKind kind = ChunkKind::kRows;
  const ChunkNamespace* ns = nullptr;
  int64_t index = 0;
  std::span<const int32_t> tokens;      // the chunk's tokens
  const Sha256Digest* chain = nullptr;  // H_i
  const Sha256Digest* parent = nullptr;  // H_{i-1}, null for i == 0
  const std::vector<LeafInfo>* leaves = nullptr;  // sealed when ns is
};

struct DecodedChunk {
  ChunkHeader header;
  std::map<std::string, LeafRows> rows;                            // rows values
  std::map<std::string, std::shared_ptr<const Cache>> snapshots;  // snapshot values
};

// Decodes and checks `value` against `request`; on failure `fault` (if
// given) says which kind of refusal the Corruption status is. A sealed
// value is decrypted in place, and the pieces' arrays share its buffer; on
// failure `*value` holds the bytes it was given (for a conditional delete).
// REQUIRES: no one else reads `*value` during the call.
Result<DecodedChunk> DecodeChunk(std::shared_ptr<std::string> value, const ChunkRequest& request,
                                 ChunkFault* fault = nullptr);

// Turns a value stored under `key` in namespace `ns` into its plain value
// (a prompt-cache file) in place: nothing to do unsealed; decrypted when
// sealed (Corruption, `value` unchanged, when its envelope does not open).
Status OpenChunkValue(std::string& value, const std::string& key, const ChunkNamespace& ns);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_CODEC_H_
