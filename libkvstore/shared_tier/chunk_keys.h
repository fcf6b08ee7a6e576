// The shared tier's key scheme (docs/format.md §8.2, §8.6): a namespace per
// (model fingerprint, chunk size) and a hash chain over the tokens, so that
// a chunk's key names everything it depends on.
//
//   namespace digest  N   = SHA-256("kvstore-namespace/1\n" fingerprint-json
//                                    "\nchunk_tokens=" C ["\ntenant=" hex(T_shared)])
//   (the tenant part only for a request with a tenant salt: TenantSalt)
//   unsealed chain    H_0 = SHA-256("kvstore-chain/1\n" N tokens[0, C))
//                     H_i = SHA-256(H_{i-1} tokens[iC, (i+1)C))
//   sealed chain      the same with HMAC-SHA256 under the namespace's name
//                     key (HKDF of the secret), so that the keys of a
//                     prompt cannot be computed without the secret
//   (tokens as little-endian int32; digests as their 32 bytes)
//
//   <prefix>v2/ns/<ns>         the namespace descriptor (fingerprint JSON)
//   <prefix>v2/m/<M>           the model record: the fingerprint a model id
//                              and C have, for servers that join a fleet
//   <prefix>v2/<ns>/c/<H_i>    chunk i: rows [iC, (i+1)C)
//   <prefix>v2/<ns>/s/<H_i>    snapshot at (i+1)C tokens
// <ns> is 32 hex digits (of N unsealed, keyed when sealed), <H_i> all 64 of H_i.
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

inline constexpr std::string_view kChunkKeyVersion = "v2/";

enum class ChunkKind { kRows, kSnapshot };

// What seals a deployment's values and keys: an empty secret seals nothing.
struct ChunkSealing {
  std::string_view secret;
  std::string_view key_prefix;
};

struct ChunkNamespace {
  Sha256Digest digest;  // N
  std::string id;       // 32 hex digits
  int64_t chunk_tokens = 0;
  std::string name_key;   // sealed: the 32-byte HMAC key of the chain and the id; else empty
  std::string value_key;  // sealed: the AES-256 key of its values; else empty
  bool sealed() const { return !value_key.empty(); }
};

// A digest's 32 bytes (what the chain and the seal's associated data hold).
std::string_view DigestBytes(const Sha256Digest& d);

// The namespace of a model and chunk size: N, then DeriveChunkNamespace.
// `tenant` (nullptr: none) gives the tenant its own namespace: its keys
// share nothing with another tenant's or with those of requests without one.
ChunkNamespace MakeChunkNamespace(const ModelFingerprint& fingerprint, int64_t chunk_tokens,
                                  const ChunkSealing& sealing = {}, const TenantSalt* tenant = nullptr);
// The one derivation of a namespace's id and keys from N (docs/format.md
// §8.6): unsealed, the id is N's first 32 hex digits; sealed, the name and
// value keys are HKDF-SHA256 of the secret bound to the key prefix and N,
// and the id is keyed by the name key.
ChunkNamespace DeriveChunkNamespace(const Sha256Digest& n, int64_t chunk_tokens, const ChunkSealing& sealing);

// The AES-256 key of the records (descriptors, model records) under a
// sealed prefix; empty when unsealed.
std::string RecordValueKey(const ChunkSealing& sealing);
// <prefix>v2/m/<M>: where the fingerprint of `model_id` at `chunk_tokens`
// is published; M is keyed by the secret when sealed.
std::string ModelRecordKey(const ChunkSealing& sealing, std::string_view model_id, int64_t chunk_tokens);

// H_0 .. H_{count-1}. REQUIRES: count * chunk_tokens <= tokens.size().
std::vector<Sha256Digest> ChainHashes(const ChunkNamespace& ns, std::span<const int32_t> tokens, size_t count);
// The chain hash after `parent` (nullptr: the first chunk) for one chunk's tokens.
Sha256Digest NextChainHash(const ChunkNamespace& ns, const Sha256Digest* parent, std::span<const int32_t> chunk);

std::string ChunkKey(std::string_view prefix, const ChunkNamespace& ns, ChunkKind kind, const Sha256Digest& hash);
std::string NamespaceKey(std::string_view prefix, std::string_view ns_id);
// "<prefix>v2/ns/" and "<prefix>v2/<ns>/c/" (or "/s/"), for scans.
std::string NamespaceKeyPrefix(std::string_view prefix);
std::string ChunkKeyPrefix(std::string_view prefix, std::string_view ns_id, ChunkKind kind);

// What a chunk key names, read from its end ("v2/<ns>/c/<H_i>" or
// ".../s/<H_i>"), whatever its prefix; nullopt for a key of another shape.
struct ChunkKeyParts {
  std::string ns_id;  // 32 hex digits
  ChunkKind kind = ChunkKind::kRows;
  std::string hash;  // H_i, 64 hex digits
};
std::optional<ChunkKeyParts> ParseChunkKey(std::string_view key);
// The <prefix> of a chunk key ParseChunkKey reads.
std::string_view ChunkKeyPrefixOf(std::string_view key);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_KEYS_H_
