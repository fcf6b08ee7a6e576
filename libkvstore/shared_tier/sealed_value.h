// The sealed envelope of a shared-tier value (docs/format.md §8.6): the
// whole plain value encrypted with AES-256-GCM under a key derived from the
// deployment's secret, with a random 96-bit nonce, the key name and a
// binding (the namespace digest N for chunks) as associated data.
//
//   offset  size  field
//   0       6     magic "kvseal"
//   6       1     version 1
//   7       1     0 (reserved)
//   8       12    nonce
//   20      n     ciphertext of the n-byte plain value
//   20+n    16    GCM tag
//   AAD = bytes [0, 8) || u32le(len(key name)) || key name || binding
//
// Thread-safe (pure functions).
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_SEALED_VALUE_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_SEALED_VALUE_H_

#include <memory>
#include <string>
#include <string_view>

#include "kvstore/status.h"

namespace kvstore {

inline constexpr std::string_view kSealedMagic = "kvseal";
inline constexpr size_t kSealedOverhead = 8 + 12 + 16;

// Whether `value` starts like a sealed envelope (its magic).
bool LooksSealed(std::string_view value);

// `plain` sealed under `value_key` (32 bytes) to `key_name` and `binding`.
// IOError when the random generator or the cipher fails.
Result<std::string> SealValue(std::string_view value_key, std::string_view key_name, std::string_view binding,
                              std::string_view plain);

// The plain value of an envelope sealed as above; Corruption naming what
// failed (not an envelope, cut short, unknown version, or a tag that does
// not verify: changed bytes, another key name, binding or secret).
Result<std::shared_ptr<const std::string>> OpenSealedValue(std::string_view value_key, std::string_view key_name,
                                                           std::string_view binding, std::string_view value);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_SEALED_VALUE_H_
