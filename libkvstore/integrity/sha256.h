// SHA-256 (FIPS 180-4), computed with OpenSSL's EVP interface (SHA-NI where
// the CPU has it). Internal: the file format's digests and the prompt-cache
// store's keys; the public API exposes digests only as hex strings in files
// (docs/format.md) and through VerifyPromptCacheFile.
//
// Thread safety: Sha256Digest is a value. A Sha256Hasher is used by one
// thread at a time; distinct hashers run concurrently.
#ifndef KVSTORE_LIBKVSTORE_INTEGRITY_SHA256_H_
#define KVSTORE_LIBKVSTORE_INTEGRITY_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvstore {

class Array;

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

// Incremental hashing.
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(Sha256Hasher&&) noexcept;
  Sha256Hasher& operator=(Sha256Hasher&&) noexcept;

  void Update(std::span<const std::byte> data);
  void Update(std::string_view data);
  // Returns the digest and resets the hasher for reuse.
  Sha256Digest Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

Sha256Digest Sha256(std::span<const std::byte> data);
Sha256Digest Sha256(std::string_view data);
// The digest of an array's logical elements in row-major order (what the
// mlx-lm fixtures and traces record), whatever its strides.
Sha256Digest Sha256(const Array& array);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_INTEGRITY_SHA256_H_
