// Digest: a tensor or header digest of a prompt-cache file, with the
// algorithm that computed it (docs/format.md §5.3-5.4). SHA-256 for files
// written for exchange, XXH3-128 (non-cryptographic, at memory speed) for
// caches that only need to catch bit rot and torn writes. Computing digests
// is internal to the library (libkvstore/integrity/digest.h).
//
// Thread safety: values.
#ifndef KVSTORE_DIGEST_H_
#define KVSTORE_DIGEST_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvstore/sha256.h"

namespace kvstore {

enum class DigestAlgorithm { kSha256, kXxh3_128 };

// "sha256", "xxh3-128": the names files store (1.kvstore_digest_algorithm).
std::string_view DigestAlgorithmName(DigestAlgorithm algorithm);
// "SHA-256", "XXH3-128": how messages name it.
std::string_view DigestAlgorithmTitle(DigestAlgorithm algorithm);
// DigestAlgorithmName's inverse, also accepting "xxh3" (the option spelling
// of kvtool --integrity and Python integrity=); nullopt for other names.
std::optional<DigestAlgorithm> DigestAlgorithmFromName(std::string_view name);
// 32 bytes for SHA-256, 16 for XXH3-128.
size_t DigestSize(DigestAlgorithm algorithm);

class Digest {
 public:
  static constexpr size_t kMaxSize = 32;
  Digest() : Digest(DigestAlgorithm::kSha256) {}
  // All zero bytes of `algorithm`'s size (a placeholder of the final length).
  explicit Digest(DigestAlgorithm algorithm);
  Digest(const Sha256Digest& d);  // NOLINT: every SHA-256 digest is a Digest
  // REQUIRES: bytes.size() == DigestSize(algorithm).
  Digest(DigestAlgorithm algorithm, std::span<const uint8_t> bytes);

  DigestAlgorithm algorithm() const { return algorithm_; }
  std::span<const uint8_t> bytes() const { return {bytes_.data(), DigestSize(algorithm_)}; }
  // Lowercase hex, 2 digits a byte. For XXH3-128 the canonical big-endian
  // form, what `xxhsum -H2` prints.
  std::string ToHex() const;
  // Exactly 2 * DigestSize(algorithm) hex digits (either case); nullopt
  // otherwise.
  static std::optional<Digest> FromHex(DigestAlgorithm algorithm, std::string_view hex);

  bool operator==(const Digest& o) const { return algorithm_ == o.algorithm_ && bytes_ == o.bytes_; }
  bool operator!=(const Digest& o) const { return !(*this == o); }

 private:
  DigestAlgorithm algorithm_;
  std::array<uint8_t, kMaxSize> bytes_{};
};

}  // namespace kvstore

#endif  // KVSTORE_DIGEST_H_
