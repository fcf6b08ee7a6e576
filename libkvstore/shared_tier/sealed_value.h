// The sealed envelope of a shared-tier value (docs/format.md §8.6): the
// whole plain value encrypted with AES-256-GCM under a key derived from the
// deployment's secret, with a random 96-bit nonce, and the key name and a
// binding (the namespace digest N for chunks) as associated data. The
// fixed fields trail the ciphertext, so that a value is sealed and opened
// in place: the plain value is the first n bytes of its own buffer.
//
//   offset  size  field
//   0       n     ciphertext of the n-byte plain value
//   n       12    nonce
//   n+12    16    GCM tag
//   n+28    1     version 1
//   n+29    1     0 (reserved)
//   n+30    6     magic "kvseal"
//   AAD = bytes [n+28, n+36) || u32le(len(key name)) || key name || binding
//
// Thread-safe (pure functions over the caller's strings).
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_SEALED_VALUE_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_SEALED_VALUE_H_

#include <array>
#include <string>
#include <string_view>

#include "kvstore/status.h"

namespace kvstore {

inline constexpr std::string_view kSealedMagic = "kvseal";
inline constexpr size_t kSealedOverhead = 12 + 16 + 2 + 6;

// Whether `value` ends like a sealed envelope (its magic).
bool LooksSealed(std::string_view value);

// Seals the plain value in `value` in place under `value_key` (32 bytes),
// bound to `key_name` and `binding`: encrypts it and appends the trailer
// (no reallocation when its capacity has kSealedOverhead bytes to spare).
// IOError when the random generator or the cipher fails.
Status SealInPlace(std::string& value, std::string_view value_key, std::string_view key_name,
                   std::string_view binding);

// The envelope's trailer, kept by OpenInPlace to undo it.
using SealedTrailer = std::array<char, kSealedOverhead>;

// Opens the envelope in `value` in place: on success `value` holds the
// plain value and `trailer` what was cut off; on failure (Corruption naming
// it: not an envelope, cut short, unknown version, or a tag that does not
// verify: changed bytes, another key name, binding or secret) `value` holds
// exactly the bytes it held before.
Status OpenInPlace(std::string& value, std::string_view value_key, std::string_view key_name,
                   std::string_view binding, SealedTrailer& trailer);

// Undoes a successful OpenInPlace: `value` holds the envelope again, byte
// for byte (GCM's counter mode is its own inverse).
void UndoOpen(std::string& value, std::string_view value_key, const SealedTrailer& trailer);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_SEALED_VALUE_H_
