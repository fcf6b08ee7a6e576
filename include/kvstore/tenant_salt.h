// TenantSalt: a request's tenant salt (vLLM's cache_salt) in the only form
// the prompt-reuse tiers keep it: one 256-bit key per tier, derived from
// the salt with HKDF-SHA256 (docs/format.md §8.7). Requests of different
// salts never share a cached prefix in any tier; requests without a salt
// use the keys they always had.
//
//   PRK      = HMAC-SHA256(key = "kvstore-tenant/1", salt)      HKDF-Extract
//   T_memory = HMAC-SHA256(key = PRK, "memory" 0x01)           HKDF-Expand, 32 bytes
//   T_disk   = HMAC-SHA256(key = PRK, "disk" 0x01)
//   T_shared = HMAC-SHA256(key = PRK, "shared" 0x01)
//
// The salt itself is dropped once the keys are made: a TenantSalt holds,
// prints and writes only the keys (hex), never the salt. The keys are
// one-way functions of it, but a guessable salt (a short tenant name) can
// be guessed by whoever reads a key: salts should be random secrets.
//
// Thread safety: an immutable value; every member may be called from many
// threads.
#ifndef KVSTORE_TENANT_SALT_H_
#define KVSTORE_TENANT_SALT_H_

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "kvstore/status.h"

namespace kvstore {

class TenantSalt {
 public:
  enum class Tier : size_t { kMemory = 0, kDisk = 1, kShared = 2 };

  // The keys of `salt` (any bytes). InvalidArgument for an empty salt: an
  // unset tenant id must not make its requests one tenant of their own
  // (nor quietly share the unsalted entries); pass no TenantSalt instead.
  static Result<TenantSalt> Make(std::string_view salt);

  // The tier's key as 64 lowercase hex digits.
  const std::string& key_hex(Tier tier) const { return keys_[static_cast<size_t>(tier)]; }

  bool operator==(const TenantSalt& other) const = default;

 private:
  TenantSalt() = default;
  std::array<std::string, 3> keys_;
};

// The memory tier's key of a model key `memory_key` for `tenant` (nullptr:
// `memory_key` unchanged): "<memory_key>\n" "tenant=" hex(T_memory).
std::string SaltedMemoryKey(std::string_view memory_key, const TenantSalt* tenant);
// The disk tier's model key (what PromptCacheStore files record as
// kvstore_model and name themselves by) for `tenant` (nullptr: `model_id`
// unchanged): "<model_id>\n" "tenant=" hex(T_disk).
std::string SaltedStoreModelKey(std::string_view model_id, const TenantSalt* tenant);

}  // namespace kvstore

#endif  // KVSTORE_TENANT_SALT_H_
