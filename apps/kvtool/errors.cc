#include <cstdio>
#include <iostream>

#include "apps/kvtool/kvtool.h"
#include "kvstore/redis_backend.h"
#include "kvstore/user_path.h"

namespace kvtool {

int ExitCodeFor(const kvstore::Status& status) {
  using kvstore::StatusCode;
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kNotFound:
    case StatusCode::kIOError:
    case StatusCode::kPermissionDenied: return kExitIo;
    case StatusCode::kCorruption:
    case StatusCode::kResourceExhausted: return kExitCorruption;
    case StatusCode::kNotSupported:
    case StatusCode::kFailedPrecondition: return kExitUnsupported;
    default: return kExitIo;
  }
}

int Fail(int code, std::string_view message) {
  // Messages quote keys, class names and metadata read from hostile input,
  // and may quote a URL a user typed with its password.
  const std::string text = TerminalText(kvstore::RedactCredentials(message), /*keep_lines=*/true);
  // What was printed comes before the error, also when both go to one pipe.
  std::cout.flush();
  std::fflush(stdout);
  std::fprintf(stderr, "kvtool: %s\n", text.c_str());
  return code;
}

namespace {

// The length of the well-formed UTF-8 sequence of a printable character
// at the start of `s` (code point >= U+00A0, not a surrogate, shortest
// form), or 0.
size_t PrintableUtf8(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  const size_t n = c >= 0xF0 ? (c <= 0xF4 ? 4 : 0) : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || s.size() < n) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  const uint32_t smallest[] = {0, 0, 0xA0, 0x800, 0x10000};
  if (cp < smallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string TerminalText(std::string_view text, bool keep_lines) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7F && c != '\\') || (keep_lines && (c == '\n' || c == '\t' || c == '\\'))) {
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (const size_t n = c >= 0x80 ? PrintableUtf8(text.substr(i)) : 0; n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
      ++i;
    }
  }
  return out;
}

std::string Abbreviated(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return std::string(text.substr(0, cut)) + "...";
}

int Fail(const kvstore::Status& status) { return Fail(ExitCodeFor(status), status.message()); }

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace kvtool

namespace kvtool {

CLI::Validator UserPath() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        kvstore::Result<std::string> expanded = kvstore::ExpandUserPath(path);
        if (!expanded.ok()) return std::string(expanded.status().message());
        path = std::move(expanded).value();
        return std::string();
      },
      "", "user path");
}

void PrintJson(const kvstore::Json& value) {
  kvstore::Json::DumpOptions pretty;
  pretty.indent = 2;
  std::cout << value.Dump(pretty) << "\n";
}

}  // namespace kvtool
