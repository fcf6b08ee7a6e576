// SHA-256 (FIPS 180-4), computed with OpenSSL's EVP interface (SHA-NI where
// the CPU has it). Internal: the file format's digests and the prompt-cache
// store's keys, the shared tier's chunk names and seals. The digest type is public (kvstore/sha256.h); computing
// digests is not part of the API (files carry them as hex, docs/format.md,
// and VerifyPromptCacheFile checks them).
//
// Thread safety: a Sha256Hasher is used by one thread at a time; distinct
// hashers run concurrently.
#ifndef KVSTORE_LIBKVSTORE_INTEGRITY_SHA256_H_
#define KVSTORE_LIBKVSTORE_INTEGRITY_SHA256_H_

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>

#include "kvstore/sha256.h"

namespace kvstore {

class Array;

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
  // The digest of what was hashed so far; the hasher goes on from there
  // (digests of every prefix of a message in one pass).
  Sha256Digest Peek() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

Sha256Digest Sha256(std::span<const std::byte> data);
Sha256Digest Sha256(std::string_view data);
// The digest of an array's logical elements in row-major order (what the
// mlx-lm fixtures and traces record), whatever its strides.
Sha256Digest Sha256(const Array& array);

// HMAC-SHA256 under `key` of the concatenation of `parts` (RFC 2104; any key
// length). The tag has a digest's size and type.
Sha256Digest HmacSha256(std::string_view key, std::initializer_list<std::string_view> parts);

// Equality that takes the same time wherever the first difference lies, for
// comparing a received tag with the expected one.
bool ConstantTimeEqual(const Sha256Digest& a, const Sha256Digest& b);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_INTEGRITY_SHA256_H_
