#include "libkvstore/integrity/digest.h"

#include <algorithm>
#include <cassert>

#include "kvstore/array.h"
#include "libkvstore/integrity/sha256.h"
#include "libkvstore/integrity/xxh3.h"
#include "libkvstore/util/hex.h"

namespace kvstore {

std::string_view DigestAlgorithmName(DigestAlgorithm algorithm) {
  return algorithm == DigestAlgorithm::kXxh3_128 ? "xxh3-128" : "sha256";
}

std::string_view DigestAlgorithmTitle(DigestAlgorithm algorithm) {
  return algorithm == DigestAlgorithm::kXxh3_128 ? "XXH3-128" : "SHA-256";
}

std::optional<DigestAlgorithm> DigestAlgorithmFromName(std::string_view name) {
  if (name == "sha256") return DigestAlgorithm::kSha256;
  if (name == "xxh3-128" || name == "xxh3") return DigestAlgorithm::kXxh3_128;
  return std::nullopt;
}

size_t DigestSize(DigestAlgorithm algorithm) { return algorithm == DigestAlgorithm::kXxh3_128 ? 16 : 32; }

Digest::Digest(DigestAlgorithm algorithm) : algorithm_(algorithm) {}

Digest::Digest(const Sha256Digest& d) : algorithm_(DigestAlgorithm::kSha256) {
  std::copy(d.bytes().begin(), d.bytes().end(), bytes_.begin());
}

Digest::Digest(DigestAlgorithm algorithm, std::span<const uint8_t> bytes) : algorithm_(algorithm) {
  assert(bytes.size() == DigestSize(algorithm));
  std::copy_n(bytes.begin(), std::min(bytes.size(), DigestSize(algorithm)), bytes_.begin());
}

std::string Digest::ToHex() const { return HexEncode(std::as_bytes(bytes())); }

std::optional<Digest> Digest::FromHex(DigestAlgorithm algorithm, std::string_view hex) {
  if (hex.size() != 2 * DigestSize(algorithm)) return std::nullopt;
  const std::optional<std::string> bytes = HexDecode(hex);
  if (!bytes) return std::nullopt;
  return Digest(algorithm, std::span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
}

Digest ComputeDigest(DigestAlgorithm algorithm, std::span<const std::byte> data) {
  if (algorithm == DigestAlgorithm::kXxh3_128) return Xxh3_128(data);
  return Sha256(data);
}

Digest ComputeDigest(DigestAlgorithm algorithm, std::string_view data) {
  return ComputeDigest(algorithm, std::as_bytes(std::span(data.data(), data.size())));
}

Digest ComputeDigest(DigestAlgorithm algorithm, const Array& array) {
  if (algorithm == DigestAlgorithm::kSha256) return Sha256(array);
  Xxh3Hasher h;
  array.ForEachRun([&](std::span<const std::byte> run) { h.Update(run); });
  return h.Finish();
}

}  // namespace kvstore
