// The shared tier's key scheme (docs/format.md §8.2): a namespace per
// (model fingerprint, chunk size) and a SHA-256 hash chain over the tokens,
// so that a chunk's key names everything it depends on.
//
//   namespace digest  N   = SHA-256("kvstore-namespace/1\n" fingerprint-json
//                                    "\nchunk_tokens=" C ["\ntenant=" hex(T_shared)])
//   (the tenant part only for a request with a tenant salt: TenantSalt)
//   chain             H_0 = SHA-256("kvstore-chain/1\n" N tokens[0, C))
//                     H_i = SHA-256(H_{i-1} tokens[iC, (i+1)C))
//   (tokens as little-endian int32; digests as their 32 bytes)
//
//   <prefix>v1/ns/<ns>         the namespace descriptor (fingerprint JSON)
//   <prefix>v1/<ns>/c/<H_i>    chunk i: rows [iC, (i+1)C)
//   <prefix>v1/<ns>/s/<H_i>    snapshot at (i+1)C tokens
// <ns> is the first 32 hex digits of N, <H_i> all 64 of H_i.
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_KEYS_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_KEYS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/model_fingerprint.h"
#include "kvstore/sha256.h"
#include "kvstore/tenant_salt.h"

namespace kvstore {

inline constexpr std::string_view kChunkKeyVersion = "v1/";

enum class ChunkKind { kRows, kSnapshot };

struct ChunkNamespace {
  Sha256Digest digest;
  std::string id;  // 32 hex digits
  int64_t chunk_tokens = 0;
};

// `tenant` (nullptr: none) gives the tenant its own namespace: its keys
// share nothing with another tenant's or with those of requests without one.
ChunkNamespace MakeChunkNamespace(const ModelFingerprint& fingerprint, int64_t chunk_tokens,
                                  const TenantSalt* tenant = nullptr);

// H_0 .. H_{count-1}. REQUIRES: count * chunk_tokens <= tokens.size().
std::vector<Sha256Digest> ChainHashes(const ChunkNamespace& ns, std::span<const int32_t> tokens, size_t count);
// The chain hash after `parent` (nullptr: the first chunk) for one chunk's tokens.
Sha256Digest NextChainHash(const ChunkNamespace& ns, const Sha256Digest* parent, std::span<const int32_t> chunk);

std::string ChunkKey(std::string_view prefix, const ChunkNamespace& ns, ChunkKind kind, const Sha256Digest& hash);
std::string NamespaceKey(std::string_view prefix, std::string_view ns_id);
// "<prefix>v1/ns/" and "<prefix>v1/<ns>/c/" (or "/s/"), for scans.
std::string NamespaceKeyPrefix(std::string_view prefix);
std::string ChunkKeyPrefix(std::string_view prefix, std::string_view ns_id, ChunkKind kind);

// What a chunk key names, read from its end ("v1/<ns>/c/<H_i>" or
// ".../s/<H_i>"), whatever its prefix; nullopt for a key of another shape.
struct ChunkKeyParts {
  std::string ns_id;  // 32 hex digits
  ChunkKind kind = ChunkKind::kRows;
  std::string hash;  // H_i, 64 hex digits
};
std::optional<ChunkKeyParts> ParseChunkKey(std::string_view key);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_KEYS_H_
