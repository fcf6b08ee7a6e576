// Token id lists as text: "1,2,3". The disk tier records an entry's key in
// its file's metadata this way, and the shared tier a chunk's tokens.
#ifndef KVSTORE_LIBKVSTORE_UTIL_TOKEN_TEXT_H_
#define KVSTORE_LIBKVSTORE_UTIL_TOKEN_TEXT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvstore {

// "1,2,3" for {1, 2, 3}; "" for none.
std::string TokensText(std::span<const int32_t> tokens);
// TokensText's inverse; nullopt for empty items, trailing commas or values
// outside int32.
std::optional<std::vector<int32_t>> ParseTokens(std::string_view s);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_TOKEN_TEXT_H_
