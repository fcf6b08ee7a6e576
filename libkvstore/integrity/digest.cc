#include "libkvstore/integrity/digest.h"

#include <algorithm>
#include <cassert>

#include "kvstore/array.h"
#include "libkvstore/integrity/sha256.h"
#include "libkvstore/integrity/xxh3.h"

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

std::string Digest::ToHex() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes()) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::optional<Digest> Digest::FromHex(DigestAlgorithm algorithm, std::string_view hex) {
  const size_t n = DigestSize(algorithm);
  if (hex.size() != 2 * n) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::array<uint8_t, kMaxSize> bytes{};
  for (size_t i = 0; i < n; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return Digest(algorithm, std::span<const uint8_t>(bytes.data(), n));
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
