#include "libkvstore/shared_tier/sealed_value.h"

#include "libkvstore/integrity/aead.h"

namespace kvstore {
namespace {

constexpr size_t kHeader = 8;
constexpr size_t kNonceAt = kHeader;
constexpr size_t kDataAt = kNonceAt + kAeadNonceSize;
constexpr char kVersion = 1;

std::span<const std::byte> B(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }
std::span<std::byte> W(std::string& s, size_t at, size_t n) {
  return std::as_writable_bytes(std::span(s.data() + at, n));
}

std::string Aad(std::string_view header, std::string_view key_name, std::string_view binding) {
  std::string aad(header);
  const uint32_t n = static_cast<uint32_t>(key_name.size());
  for (int b = 0; b < 4; ++b) aad.push_back(static_cast<char>((n >> (8 * b)) & 0xFF));
  aad += key_name;
  aad += binding;
  return aad;
}

}  // namespace

bool LooksSealed(std::string_view value) { return value.starts_with(kSealedMagic); }

Result<std::string> SealValue(std::string_view value_key, std::string_view key_name, std::string_view binding,
                              std::string_view plain) {
  std::string out(kSealedOverhead + plain.size(), '\0');
  out.replace(0, kSealedMagic.size(), kSealedMagic);
  out[6] = kVersion;
  if (!RandomBytes(W(out, kNonceAt, kAeadNonceSize))) return Status::IOError("shared tier: no random nonce");
  const std::string aad = Aad(std::string_view(out).substr(0, kHeader), key_name, binding);
  if (!AeadSeal(value_key, B(std::string_view(out).substr(kNonceAt, kAeadNonceSize)), B(aad), B(plain),
                W(out, kDataAt, plain.size()), W(out, kDataAt + plain.size(), kAeadTagSize))) {
    return Status::IOError("shared tier: AES-GCM failed");
  }
  return out;
}

Result<std::shared_ptr<const std::string>> OpenSealedValue(std::string_view value_key, std::string_view key_name,
                                                           std::string_view binding, std::string_view value) {
  if (!LooksSealed(value)) return Status::Corruption("not sealed (no kvseal envelope)");
  if (value.size() < kSealedOverhead) {
    return Status::Corruption("sealed envelope cut short: " + std::to_string(value.size()) + " bytes");
  }
  if (value[6] != kVersion || value[7] != 0) {
    return Status::Corruption("unknown sealed envelope version " + std::to_string(static_cast<uint8_t>(value[6])));
  }
  const size_t n = value.size() - kSealedOverhead;
  auto plain = std::make_shared<std::string>(n, '\0');
  const std::string aad = Aad(value.substr(0, kHeader), key_name, binding);
  if (!AeadOpen(value_key, B(value.substr(kNonceAt, kAeadNonceSize)), B(aad), B(value.substr(kDataAt, n)),
                W(*plain, 0, n), B(value.substr(kDataAt + n)))) {
    return Status::Corruption("the seal does not verify (changed bytes, another key, namespace or secret)");
  }
  return std::shared_ptr<const std::string>(std::move(plain));
}

}  // namespace kvstore
