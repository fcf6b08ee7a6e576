// TenantSalt: the per-tier keys of a tenant salt (HKDF-SHA256, RFC 5869).
#include "kvstore/tenant_salt.h"

#include "libkvstore/integrity/aead.h"
#include "libkvstore/integrity/sha256.h"
#include "libkvstore/util/hex.h"

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
  TenantSalt out;
  for (size_t i = 0; i < out.keys_.size(); ++i) {
    out.keys_[i] = HexEncode(HkdfSha256(salt, kExtractSalt, kTierInfo[i], Sha256Digest::kSize));
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
