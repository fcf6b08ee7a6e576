// AES-256-GCM, HKDF and random bytes through OpenSSL's EVP interface.
#include "libkvstore/integrity/aead.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <cassert>
#include <climits>
#include <new>

namespace kvstore {
namespace {

const unsigned char* U(const void* p) { return static_cast<const unsigned char*>(p); }
unsigned char* U(void* p) { return static_cast<unsigned char*>(p); }

// The cipher is fetched once; a context per call keeps the functions reentrant.
const EVP_CIPHER* Aes256Gcm() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (cipher == nullptr) throw std::bad_alloc();
  return cipher;
}

struct CipherCtx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  CipherCtx() {
    if (ctx == nullptr) throw std::bad_alloc();
  }
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
};

// EVP takes int lengths: long inputs go through in pieces.
constexpr size_t kPiece = size_t{1} << 30;

}  // namespace

std::string HkdfSha256(std::string_view secret, std::string_view salt, std::string_view info, size_t size) {
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf != nullptr ? EVP_KDF_CTX_new(kdf) : nullptr;
  if (ctx == nullptr) throw std::bad_alloc();
  char digest[] = "SHA256";
  assert(!secret.empty());
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(secret.data()), secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
      OSSL_PARAM_construct_end()};
  std::string out(size, '\0');
  const int ok = EVP_KDF_derive(ctx, U(out.data()), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) throw std::bad_alloc();
  return out;
}

bool RandomBytes(std::span<std::byte> out) {
  return out.size() <= INT_MAX && RAND_bytes(U(out.data()), static_cast<int>(out.size())) == 1;
}

namespace {

// One pass of GCM in either direction: EVP_Cipher* with enc 1 or 0. The
// tag is read (decrypting) or written (encrypting) through `tag`.
bool Gcm(int enc, std::string_view key, std::span<const std::byte> nonce, std::span<const std::byte> aad,
         std::span<const std::byte> in, std::span<std::byte> out, std::byte* tag) {
  assert(key.size() == kAeadKeySize && nonce.size() == kAeadNonceSize);
  assert(out.size() == in.size());
  CipherCtx c;
  if (EVP_CipherInit_ex2(c.ctx, Aes256Gcm(), U(key.data()), U(nonce.data()), enc, nullptr) != 1) return false;
  int n = 0;
  for (size_t at = 0; at < aad.size(); at += kPiece) {
    const int len = static_cast<int>(std::min(kPiece, aad.size() - at));
    if (EVP_CipherUpdate(c.ctx, nullptr, &n, U(aad.data() + at), len) != 1) return false;
  }
  for (size_t at = 0; at < in.size(); at += kPiece) {
    const int len = static_cast<int>(std::min(kPiece, in.size() - at));
    if (EVP_CipherUpdate(c.ctx, U(out.data() + at), &n, U(in.data() + at), len) != 1 || n != len) return false;
  }
  if (enc == 0 && EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kAeadTagSize, tag) != 1) return false;
  if (EVP_CipherFinal_ex(c.ctx, nullptr, &n) != 1) return false;  // decrypting: the tag check
  return enc == 0 || EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kAeadTagSize, tag) == 1;
}

}  // namespace

bool AeadSeal(std::string_view key, std::span<const std::byte> nonce, std::span<const std::byte> aad,
              std::span<const std::byte> in, std::span<std::byte> out, std::span<std::byte> tag) {
  assert(tag.size() == kAeadTagSize);
  return Gcm(1, key, nonce, aad, in, out, tag.data());
}

bool AeadOpen(std::string_view key, std::span<const std::byte> nonce, std::span<const std::byte> aad,
              std::span<const std::byte> in, std::span<std::byte> out, std::span<const std::byte> tag) {
  assert(tag.size() == kAeadTagSize);
  // EVP's ctrl takes a non-const pointer to the tag it only reads when decrypting.
  return Gcm(0, key, nonce, aad, in, out, const_cast<std::byte*>(tag.data()));
}

}  // namespace kvstore
