#include "libkvstore/shared_tier/sealed_value.h"

#include <cstring>

#include "libkvstore/integrity/aead.h"

namespace kvstore {
namespace {

// Offsets within the trailer.
constexpr size_t kNonceAt = 0;
constexpr size_t kTagAt = kNonceAt + kAeadNonceSize;
constexpr size_t kFixedAt = kTagAt + kAeadTagSize;  // version, reserved, magic
constexpr char kVersion = 1;

std::span<const std::byte> B(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }
std::span<std::byte> W(std::string& s, size_t at, size_t n) {
  return std::as_writable_bytes(std::span(s.data() + at, n));
}

std::string Aad(std::string_view fixed, std::string_view key_name, std::string_view binding) {
  std::string aad(fixed);
  const uint32_t n = static_cast<uint32_t>(key_name.size());
  for (int b = 0; b < 4; ++b) aad.push_back(static_cast<char>((n >> (8 * b)) & 0xFF));
  aad += key_name;
  aad += binding;
  return aad;
}

// Undoes an in-place decryption of value[0, n): GCM's keystream under the
// same key and nonce turns the plaintext back into the stored ciphertext.
void EncryptBack(std::string& value, size_t n, std::string_view value_key, std::string_view nonce) {
  std::array<char, kAeadTagSize> unused;
  (void)AeadSeal(value_key, B(nonce), {}, B(std::string_view(value).substr(0, n)), W(value, 0, n),
                 std::as_writable_bytes(std::span(unused)));
}

}  // namespace

bool LooksSealed(std::string_view value) { return value.ends_with(kSealedMagic); }

Status SealInPlace(std::string& value, std::string_view value_key, std::string_view key_name,
                   std::string_view binding) {
  const size_t n = value.size();
  std::string trailer(kSealedOverhead, '\0');
  trailer[kFixedAt] = kVersion;
  std::memcpy(trailer.data() + kFixedAt + 2, kSealedMagic.data(), kSealedMagic.size());
  if (!RandomBytes(W(trailer, kNonceAt, kAeadNonceSize))) return Status::IOError("shared tier: no random nonce");
  const std::string aad = Aad(std::string_view(trailer).substr(kFixedAt), key_name, binding);
  if (!AeadSeal(value_key, B(std::string_view(trailer).substr(kNonceAt, kAeadNonceSize)), B(aad),
                B(value), W(value, 0, n), W(trailer, kTagAt, kAeadTagSize))) {
    return Status::IOError("shared tier: AES-GCM failed");
  }
  value += trailer;
  return Status::OK();
}

Status OpenInPlace(std::string& value, std::string_view value_key, std::string_view key_name,
                   std::string_view binding, SealedTrailer& trailer) {
  if (!LooksSealed(value)) return Status::Corruption("not sealed (no kvseal envelope)");
  if (value.size() < kSealedOverhead) {
    return Status::Corruption("sealed envelope cut short: " + std::to_string(value.size()) + " bytes");
  }
  const size_t n = value.size() - kSealedOverhead;
  std::memcpy(trailer.data(), value.data() + n, kSealedOverhead);
  const std::string_view t(trailer.data(), trailer.size());
  if (t[kFixedAt] != kVersion || t[kFixedAt + 1] != 0) {
    return Status::Corruption("unknown sealed envelope version " + std::to_string(static_cast<uint8_t>(t[kFixedAt])));
  }
  const std::string aad = Aad(t.substr(kFixedAt), key_name, binding);
  if (!AeadOpen(value_key, B(t.substr(kNonceAt, kAeadNonceSize)), B(aad), B(std::string_view(value).substr(0, n)),
                W(value, 0, n), B(t.substr(kTagAt, kAeadTagSize)))) {
    EncryptBack(value, n, value_key, t.substr(kNonceAt, kAeadNonceSize));  // the caller keeps its bytes
    return Status::Corruption("the seal does not verify (changed bytes, another key, namespace or secret)");
  }
  value.resize(n);  // shrinking keeps the buffer: the plain value stays where it was decrypted
  return Status::OK();
}

void UndoOpen(std::string& value, std::string_view value_key, const SealedTrailer& trailer) {
  const std::string_view t(trailer.data(), trailer.size());
  EncryptBack(value, value.size(), value_key, t.substr(kNonceAt, kAeadNonceSize));
  value.append(t);
}

}  // namespace kvstore
