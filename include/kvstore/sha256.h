// Sha256Digest: a SHA-256 digest as a value, public so that API types can
// carry a digest (prompt-cache files store them as 64 hex digits,
// docs/format.md). Computing digests is internal to the library
// (libkvstore/integrity/sha256.h).
//
// Thread safety: a value.
#ifndef KVSTORE_SHA256_H_
#define KVSTORE_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvstore {

// A SHA-256 digest; a distinct type so it is never mixed up with other bytes.
class Sha256Digest {
 public:
  static constexpr size_t kSize = 32;
  Sha256Digest() { bytes_.fill(0); }
  explicit Sha256Digest(const std::array<uint8_t, kSize>& bytes) : bytes_(bytes) {}

  // 64 lowercase hex digits.
  std::string ToHex() const;
  // Accepts exactly 64 hex digits (either case); nullopt otherwise.
  static std::optional<Sha256Digest> FromHex(std::string_view hex);

  const std::array<uint8_t, kSize>& bytes() const { return bytes_; }
  bool operator==(const Sha256Digest& o) const { return bytes_ == o.bytes_; }
  bool operator!=(const Sha256Digest& o) const { return bytes_ != o.bytes_; }

 private:
  std::array<uint8_t, kSize> bytes_;
};

}  // namespace kvstore

#endif  // KVSTORE_SHA256_H_
