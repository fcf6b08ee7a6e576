// AES-256-GCM, HKDF-SHA256 and random bytes, through OpenSSL's EVP
// interface (AES-NI and CLMUL code paths where the CPU has them). Internal:
// the shared tier's sealed values and key names (docs/format.md §8.6).
//
// Thread safety: every function is reentrant.
#ifndef KVSTORE_LIBKVSTORE_INTEGRITY_AEAD_H_
#define KVSTORE_LIBKVSTORE_INTEGRITY_AEAD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvstore {

inline constexpr size_t kAeadKeySize = 32;    // AES-256
inline constexpr size_t kAeadNonceSize = 12;  // 96 bits
inline constexpr size_t kAeadTagSize = 16;

// HKDF-SHA256 (RFC 5869, extract then expand) of `secret` with `salt` and
// `info`: `size` bytes (at most 255 * 32). REQUIRES: !secret.empty() (every
// caller refuses an empty secret or salt first; OpenSSL refuses an empty key,
// and no stand-in is substituted, so two secrets never share a key).
std::string HkdfSha256(std::string_view secret, std::string_view salt, std::string_view info, size_t size);

// Fills `out` from the system's cryptographic generator; false when it fails.
[[nodiscard]] bool RandomBytes(std::span<std::byte> out);

// Encrypts `in` into `out` (the same size; the same memory is allowed) under
// `key` and `nonce`, authenticating `aad` as well, and writes the tag.
// REQUIRES: key.size() == kAeadKeySize, nonce.size() == kAeadNonceSize,
// tag.size() == kAeadTagSize. False only when OpenSSL fails.
[[nodiscard]] bool AeadSeal(std::string_view key, std::span<const std::byte> nonce, std::span<const std::byte> aad,
                            std::span<const std::byte> in, std::span<std::byte> out, std::span<std::byte> tag);

// Decrypts `in` into `out` (the same size; the same memory is allowed);
// false when the tag does not verify (then `out` holds no plaintext worth
// reading). Same REQUIRES as AeadSeal.
[[nodiscard]] bool AeadOpen(std::string_view key, std::span<const std::byte> nonce, std::span<const std::byte> aad,
                            std::span<const std::byte> in, std::span<std::byte> out, std::span<const std::byte> tag);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_INTEGRITY_AEAD_H_
