// The one hexadecimal codec: digests in file headers, Redis key names and
// value headers, model keys in the disk tier's manifest.
#ifndef KVSTORE_LIBKVSTORE_UTIL_HEX_H_
#define KVSTORE_LIBKVSTORE_UTIL_HEX_H_

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvstore {

// Two lowercase digits a byte.
std::string HexEncode(std::span<const std::byte> bytes);
std::string HexEncode(std::string_view bytes);

// The bytes of `hex` (digits of either case), or nullopt for an odd length
// or any other character.
std::optional<std::string> HexDecode(std::string_view hex);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_HEX_H_
