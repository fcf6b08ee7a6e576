// TenantSalt: the per-tier keys of a tenant salt (HKDF-SHA256, RFC 5869).
#include "kvstore/tenant_salt.h"

#include "libkvstore/integrity/sha256.h"

namespace kvstore {
namespace {

constexpr std::string_view kExtractSalt = "kvstore-tenant/1";
constexpr std::string_view kTierInfo[] = {"memory", "disk", "shared"};

std::string WithTenant(std::string_view key, const std::string& tenant_hex) {
  std::string out(key);
  out += "\ntenant=";
  out += tenant_hex;
  return out;
}

}  // namespace

Result<TenantSalt> TenantSalt::Make(std::string_view salt) {
  if (salt.empty()) {
    return Status::InvalidArgument("tenant salt: empty (pass no salt for requests without one)");
  }
  const Sha256Digest prk = HmacSha256(kExtractSalt, {salt});
  const std::string_view prk_bytes(reinterpret_cast<const char*>(prk.bytes().data()), Sha256Digest::kSize);
  TenantSalt out;
  for (size_t i = 0; i < out.keys_.size(); ++i) {
    // One block of HKDF-Expand: T(1) = HMAC(PRK, info || 0x01), L = 32.
    out.keys_[i] = HmacSha256(prk_bytes, {kTierInfo[i], std::string_view("\x01", 1)}).ToHex();
  }
  return out;
}

std::string SaltedMemoryKey(std::string_view memory_key, const TenantSalt* tenant) {
  if (tenant == nullptr) return std::string(memory_key);
  return WithTenant(memory_key, tenant->key_hex(TenantSalt::Tier::kMemory));
}

std::string SaltedStoreModelKey(std::string_view model_id, const TenantSalt* tenant) {
  if (tenant == nullptr) return std::string(model_id);
  return WithTenant(model_id, tenant->key_hex(TenantSalt::Tier::kDisk));
}

}  // namespace kvstore
