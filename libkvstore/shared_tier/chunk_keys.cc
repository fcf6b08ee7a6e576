#include "libkvstore/shared_tier/chunk_keys.h"

#include <cassert>

#include "libkvstore/integrity/sha256.h"

namespace kvstore {
namespace {

void HashTokens(Sha256Hasher& h, std::span<const int32_t> tokens) {
  // Little-endian whatever the host: the chain is shared between machines.
  std::string bytes(tokens.size() * 4, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((t >> (8 * b)) & 0xFF);
  }
  h.Update(std::string_view(bytes));
}

bool IsLowerHex(std::string_view s, size_t digits) {
  return s.size() == digits && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string_view DigestBytes(const Sha256Digest& d) {
  return std::string_view(reinterpret_cast<const char*>(d.bytes().data()), Sha256Digest::kSize);
}

}  // namespace

ChunkNamespace MakeChunkNamespace(const ModelFingerprint& fingerprint, int64_t chunk_tokens,
                                  const TenantSalt* tenant) {
  std::string text = "kvstore-namespace/1\n" + fingerprint.json() + "\nchunk_tokens=" + std::to_string(chunk_tokens);
  if (tenant != nullptr) text += "\ntenant=" + tenant->key_hex(TenantSalt::Tier::kShared);
  ChunkNamespace ns;
  ns.digest = Sha256(std::string_view(text));
  ns.id = ns.digest.ToHex().substr(0, 32);
  ns.chunk_tokens = chunk_tokens;
  return ns;
}

Sha256Digest NextChainHash(const ChunkNamespace& ns, const Sha256Digest* parent, std::span<const int32_t> chunk) {
  Sha256Hasher h;
  if (parent == nullptr) {
    h.Update(std::string_view("kvstore-chain/1\n"));
    h.Update(DigestBytes(ns.digest));
  } else {
    h.Update(DigestBytes(*parent));
  }
  HashTokens(h, chunk);
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
  // <prefix>v1/<32 hex>/<c|s>/<64 hex>
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

}  // namespace kvstore
