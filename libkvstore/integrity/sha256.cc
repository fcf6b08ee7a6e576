// SHA-256 (and the SHA-1 of sha1.h) through OpenSSL's EVP interface (which
// picks SHA-NI/AVX2 code paths at run time).
#include "libkvstore/integrity/sha256.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cassert>

#include "kvstore/array.h"
#include "kvstore/digest.h"
#include "libkvstore/integrity/sha1.h"
#include "libkvstore/util/hex.h"

namespace kvstore {

std::string Sha256Digest::ToHex() const { return Digest(*this).ToHex(); }

std::optional<Sha256Digest> Sha256Digest::FromHex(std::string_view hex) {
  const std::optional<Digest> d = Digest::FromHex(DigestAlgorithm::kSha256, hex);
  if (!d) return std::nullopt;
  std::array<uint8_t, kSize> bytes;
  std::copy(d->bytes().begin(), d->bytes().end(), bytes.begin());
  return Sha256Digest(bytes);
}

struct Sha256Hasher::Impl {
  EVP_MD_CTX* ctx = nullptr;
  Impl() : ctx(EVP_MD_CTX_new()) { Reset(); }
  ~Impl() { EVP_MD_CTX_free(ctx); }
  void Reset() {
    // Only fails on allocation failure inside OpenSSL; treat like bad_alloc.
    if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
      throw std::bad_alloc();
    }
  }
};

Sha256Hasher::Sha256Hasher() : impl_(std::make_unique<Impl>()) {}
Sha256Hasher::~Sha256Hasher() = default;
Sha256Hasher::Sha256Hasher(Sha256Hasher&&) noexcept = default;
Sha256Hasher& Sha256Hasher::operator=(Sha256Hasher&&) noexcept = default;

void Sha256Hasher::Update(std::span<const std::byte> data) {
  if (!data.empty()) EVP_DigestUpdate(impl_->ctx, data.data(), data.size());
}

void Sha256Hasher::Update(std::string_view data) {
  if (!data.empty()) EVP_DigestUpdate(impl_->ctx, data.data(), data.size());
}

Sha256Digest Sha256Hasher::Finish() {
  std::array<uint8_t, Sha256Digest::kSize> out;
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, out.data(), &len);
  assert(len == Sha256Digest::kSize);
  impl_->Reset();
  return Sha256Digest(out);
}

Sha256Digest Sha256Hasher::Peek() const {
  Impl copy;
  if (EVP_MD_CTX_copy_ex(copy.ctx, impl_->ctx) != 1) throw std::bad_alloc();
  std::array<uint8_t, Sha256Digest::kSize> out;
  unsigned int len = 0;
  EVP_DigestFinal_ex(copy.ctx, out.data(), &len);
  assert(len == Sha256Digest::kSize);
  return Sha256Digest(out);
}

Sha256Digest Sha256(std::span<const std::byte> data) {
  Sha256Hasher h;
  h.Update(data);
  return h.Finish();
}

Sha256Digest Sha256(std::string_view data) {
  Sha256Hasher h;
  h.Update(data);
  return h.Finish();
}

Sha256Digest Sha256(const Array& array) {
  Sha256Hasher h;
  array.ForEachRun([&](std::span<const std::byte> run) { h.Update(run); });
  return h.Finish();
}

Sha256Digest HmacSha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  // The HMAC algorithm is fetched once; a context per call keeps this reentrant.
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  if (ctx == nullptr) throw std::bad_alloc();
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                               OSSL_PARAM_construct_end()};
  // OpenSSL reads a null key as "keep the previous key": an empty key needs
  // a non-null pointer.
  static constexpr unsigned char kEmpty[1] = {0};
  const auto* key_bytes = key.empty() ? kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  if (EVP_MAC_init(ctx, key_bytes, key.size(), params) != 1) {
    EVP_MAC_CTX_free(ctx);
    throw std::bad_alloc();
  }
  for (std::string_view part : parts) {
    if (!part.empty()) EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size());
  }
  std::array<uint8_t, Sha256Digest::kSize> out;
  size_t len = 0;
  EVP_MAC_final(ctx, out.data(), &len, out.size());
  EVP_MAC_CTX_free(ctx);
  assert(len == Sha256Digest::kSize);
  return Sha256Digest(out);
}

std::string Sha1Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha1(), nullptr) != 1) throw std::bad_alloc();
  return HexEncode(std::as_bytes(std::span(digest, len)));
}

bool ConstantTimeEqual(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.bytes().data(), b.bytes().data(), Sha256Digest::kSize) == 0;
}

}  // namespace kvstore
