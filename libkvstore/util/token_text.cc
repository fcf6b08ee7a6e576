#include "libkvstore/util/token_text.h"

#include <charconv>
#include <system_error>

namespace kvstore {

// "1,2,3" for {1, 2, 3}; "" for none.
std::string TokensText(std::span<const int32_t> tokens) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(tokens[i]);
  }
  return out;
}

// "1,2,3" -> {1, 2, 3}; "" -> {}. Empty items and trailing commas are malformed.
std::optional<std::vector<int32_t>> ParseTokens(std::string_view s) {
  std::vector<int32_t> out;
  if (s.empty()) return out;
  while (true) {
    const size_t comma = s.find(',');
    const std::string_view part = s.substr(0, comma);
    int32_t v;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size()) return std::nullopt;
    out.push_back(v);
    if (comma == std::string_view::npos) return out;
    s.remove_prefix(comma + 1);
  }
}

}  // namespace kvstore
