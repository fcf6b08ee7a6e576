#include "libkvstore/shared_tier/chunk_keys.h"

#include <cassert>

#include "libkvstore/integrity/aead.h"
#include "libkvstore/integrity/sha256.h"

namespace kvstore {
namespace {

// Little-endian whatever the host: the chain is shared between machines.
std::string TokenBytes(std::span<const int32_t> tokens) {
  std::string bytes(tokens.size() * 4, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((t >> (8 * b)) & 0xFF);
  }
  return bytes;
}

// HKDF-SHA256 of the secret, salt "kvstore-seal/2", info "kvstore-seal/2 <purpose>\n<prefix>[\n<N>]".
std::string SealKey(const ChunkSealing& sealing, std::string_view purpose, std::string_view n = {}) {
  std::string info = "kvstore-seal/2 " + std::string(purpose) + "\n" + std::string(sealing.key_prefix);
  if (!n.empty()) info += "\n" + std::string(n);
  return HkdfSha256(sealing.secret, "kvstore-seal/2", info, kAeadKeySize);
}

bool IsLowerHex(std::string_view s, size_t digits) {
  return s.size() == digits && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace

std::string_view DigestBytes(const Sha256Digest& d) {
  return std::string_view(reinterpret_cast<const char*>(d.bytes().data()), Sha256Digest::kSize);
}

ChunkNamespace MakeChunkNamespace(const ModelFingerprint& fingerprint, int64_t chunk_tokens,
                                  const ChunkSealing& sealing, const TenantSalt* tenant) {
  std::string text =
      "kvstore-namespace/1\n" + fingerprint.json() + "\nchunk_tokens=" + std::to_string(chunk_tokens);
  if (tenant != nullptr) text += "\ntenant=" + tenant->key_hex(TenantSalt::Tier::kShared);
  return DeriveChunkNamespace(Sha256(std::string_view(text)), chunk_tokens, sealing);
}

ChunkNamespace DeriveChunkNamespace(const Sha256Digest& n, int64_t chunk_tokens, const ChunkSealing& sealing) {
  ChunkNamespace ns;
  ns.digest = n;
  ns.chunk_tokens = chunk_tokens;
  if (sealing.secret.empty()) {
    ns.id = n.ToHex().substr(0, 32);
    return ns;
  }
  ns.name_key = SealKey(sealing, "names", DigestBytes(n));
  ns.value_key = SealKey(sealing, "values", DigestBytes(n));
  ns.id = HmacSha256(ns.name_key, {"kvstore-namespace-id/2"}).ToHex().substr(0, 32);
  return ns;
}

std::string RecordValueKey(const ChunkSealing& sealing) {
  return sealing.secret.empty() ? std::string() : SealKey(sealing, "records");
}

std::string ModelRecordKey(const ChunkSealing& sealing, std::string_view model_id, int64_t chunk_tokens) {
  const std::string text =
      "kvstore-model/2\n" + std::string(model_id) + "\nchunk_tokens=" + std::to_string(chunk_tokens);
  const Sha256Digest m =
      sealing.secret.empty() ? Sha256(std::string_view(text)) : HmacSha256(SealKey(sealing, "record-names"), {text});
  return std::string(sealing.key_prefix) + std::string(kChunkKeyVersion) + "m/" + m.ToHex();
}

Sha256Digest NextChainHash(const ChunkNamespace& ns, const Sha256Digest* parent, std::span<const int32_t> chunk) {
  const std::string tokens = TokenBytes(chunk);
  if (ns.sealed()) {
    return parent == nullptr ? HmacSha256(ns.name_key, {"kvstore-chain/2\n", DigestBytes(ns.digest), tokens})
                             : HmacSha256(ns.name_key, {DigestBytes(*parent), tokens});
  }
  Sha256Hasher h;
  if (parent == nullptr) {
    h.Update(std::string_view("kvstore-chain/1\n"));
    h.Update(DigestBytes(ns.digest));
  } else {
    h.Update(DigestBytes(*parent));
  }
  h.Update(std::string_view(tokens));
  return h.Finish();
}

std::vector<Sha256Digest> ChainHashes(const ChunkNamespace& ns, std::span<const int32_t> tokens, size_t count) {
  assert(count * static_cast<size_t>(ns.chunk_tokens) <= tokens.size());
  std::vector<Sha256Digest> out;
  out.reserve(count);
  const size_t c = static_cast<size_t>(ns.chunk_tokens);
  for (size_t i = 0; i < count; ++i) {
    out.push_back(NextChainHash(ns, i == 0 ? nullptr : &out[i - 1], tokens.subspan(i * c, c)));
  }
  return out;
}

std::string ChunkKeyPrefix(std::string_view prefix, std::string_view ns_id, ChunkKind kind) {
  return std::string(prefix) + std::string(kChunkKeyVersion) + std::string(ns_id) +
         (kind == ChunkKind::kRows ? "/c/" : "/s/");
}

std::string ChunkKey(std::string_view prefix, const ChunkNamespace& ns, ChunkKind kind, const Sha256Digest& hash) {
  return ChunkKeyPrefix(prefix, ns.id, kind) + hash.ToHex();
}

std::string NamespaceKeyPrefix(std::string_view prefix) {
  return std::string(prefix) + std::string(kChunkKeyVersion) + "ns/";
}

std::string NamespaceKey(std::string_view prefix, std::string_view ns_id) {
  return NamespaceKeyPrefix(prefix) + std::string(ns_id);
}

std::optional<ChunkKeyParts> ParseChunkKey(std::string_view key) {
  // <prefix>v2/<32 hex>/<c|s>/<64 hex>
  constexpr size_t kTail = 3 + 32 + 3 + 64;
  if (key.size() < kTail) return std::nullopt;
  const std::string_view tail = key.substr(key.size() - kTail);
  const std::string_view ns = tail.substr(3, 32), kind = tail.substr(35, 3), hash = tail.substr(38);
  if (!tail.starts_with(kChunkKeyVersion) || !IsLowerHex(ns, 32) || !IsLowerHex(hash, 64) ||
      (kind != "/c/" && kind != "/s/")) {
    return std::nullopt;
  }
  return ChunkKeyParts{std::string(ns), kind == "/c/" ? ChunkKind::kRows : ChunkKind::kSnapshot, std::string(hash)};
}

std::string_view ChunkKeyPrefixOf(std::string_view key) {
  constexpr size_t kTail = 3 + 32 + 3 + 64;
  return key.substr(0, key.size() >= kTail ? key.size() - kTail : 0);
}

}  // namespace kvstore
