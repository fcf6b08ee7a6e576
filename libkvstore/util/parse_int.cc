#include "libkvstore/util/parse_int.h"

#include <charconv>
#include <string>

namespace kvstore {

namespace {

std::string Quoted(std::string_view text) {
  constexpr size_t kShown = 40;
  // Appended piece by piece: operator+ on a literal here trips GCC 12's
  // -Wrestrict false positive at -O3 (GCC PR 105329).
  std::string out = "\"";
  out.append(text.substr(0, kShown));
  out.append(text.size() > kShown ? "...\"" : "\"");
  return out;
}

bool IsPythonSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

Result<int64_t> ParseInt64(std::string_view text, IntSyntax syntax) {
  std::string_view s = text;
  if (syntax == IntSyntax::kPython) {
    while (!s.empty() && IsPythonSpace(s.front())) s.remove_prefix(1);
    while (!s.empty() && IsPythonSpace(s.back())) s.remove_suffix(1);
    if (s.size() > 1 && s.front() == '+' && s[1] != '-') s.remove_prefix(1);
  }
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || end != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return Status::InvalidArgument(Quoted(text) + " is not an integer");
  }
  if (ec == std::errc::result_out_of_range) return Status::InvalidArgument(Quoted(text) + " is not an integer in the int64 range");
  return value;
}

}  // namespace kvstore
