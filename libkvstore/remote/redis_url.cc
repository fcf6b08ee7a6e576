// ParseRedisUrl: redis://[USER:PASSWORD@]HOST:PORT, strictly. Anything the
// grammar does not name (a path, a query, TLS, a database) is refused, so a
// typo never silently points a server at the wrong store. No message quotes
// a part of the URL: a malformed one may hold its password anywhere.
#include <charconv>
#include <string>
#include <string_view>

#include "kvstore/redis_backend.h"

namespace kvstore {
namespace {

constexpr size_t kMaxUrlBytes = 4096;
constexpr size_t kMaxHostBytes = 253;
// A user name or password longer than this is refused. It also keeps the
// redacted form (whose user is %-encoded, up to 3 bytes per byte) under
// kMaxUrlBytes, so what RedactedRedisUrl prints always parses back.
constexpr size_t kMaxCredentialBytes = 1024;

Status Bad(std::string_view what) { return Status::InvalidArgument("redis url: " + std::string(what)); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes a user name or password. `what` names it in errors.
Result<std::string> Decode(std::string_view in, std::string_view what) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) {
      return Bad(std::string(what) + " has a truncated %-escape");
    }
    int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return Bad(std::string(what) + " has an invalid %-escape");
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

// Percent-encodes all but unreserved characters, so that the result parses.
std::string Encode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : in) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      out.push_back(c);
    } else {
      out += '%';
      out += kHex[static_cast<uint8_t>(c) >> 4];
      out += kHex[static_cast<uint8_t>(c) & 15];
    }
  }
  return out;
}

bool IsHostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// True when `s` is printable ASCII without spaces (what a URL may hold).
bool IsUrlText(std::string_view s) {
  for (char c : s) {
    if (c <= ' ' || c >= 0x7f) return false;
  }
  return true;
}

Result<uint16_t> ParsePort(std::string_view text) {
  if (text.empty()) return Bad("the port is missing (redis://HOST:PORT)");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.size() > 5 || value == 0 ||
      value > 65535) {
    return Bad("the port is not a number in 1..65535");
  }
  return static_cast<uint16_t>(value);
}

// True when `text` starts with `prefix`, ignoring ASCII case (URL schemes
// are case-insensitive, RFC 3986 §3.1).
bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = text[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

}  // namespace

bool HasRedisScheme(std::string_view text) {
  return StartsWithNoCase(text, "redis://") || StartsWithNoCase(text, "rediss://");
}

Result<RedisUrl> ParseRedisUrl(std::string_view url) {
  if (url.size() > kMaxUrlBytes) return Bad("longer than 4096 bytes");
  if (!IsUrlText(url)) return Bad("contains spaces or non-printable bytes");
  constexpr std::string_view kScheme = "redis://";
  if (StartsWithNoCase(url, "rediss://")) {
    return Status::NotSupported("redis url: TLS (rediss://) is not supported; use redis:// (a TLS proxy such as "
                                "stunnel can carry it)");
  }
  if (!StartsWithNoCase(url, kScheme)) return Bad("must start with redis://");
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find_first_of("/?#") != std::string_view::npos) {
    return Bad("a path, database or query after HOST:PORT is not supported");
  }

  RedisUrl out;
  // The last '@' ends the credentials: a password may hold an unencoded '@'.
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) return Bad("credentials must be USER:PASSWORD");
    KV_ASSIGN_OR_RETURN(out.user, Decode(userinfo.substr(0, colon), "user"));
    KV_ASSIGN_OR_RETURN(out.password, Decode(userinfo.substr(colon + 1), "password"));
    if (out.password.empty()) return Bad("the password is empty");
    if (out.user.size() > kMaxCredentialBytes || out.password.size() > kMaxCredentialBytes) {
      return Bad("a user name or password is longer than 1024 bytes");
    }
  }

  std::string_view port_text;
  if (rest.starts_with('[')) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return Bad("'[' of an IPv6 host is not closed");
    std::string_view host = rest.substr(1, close - 1);
    if (host.empty() || host.find_first_not_of(":.0123456789abcdefABCDEF") != host.npos ||
        host.find(':') == host.npos) {
      return Bad("the host in [...] is not an IPv6 address");
    }
    out.host = std::string(host);
    rest = rest.substr(close + 1);
    if (!rest.starts_with(':')) return Bad("the port is missing (redis://[ADDR]:PORT)");
    port_text = rest.substr(1);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return Bad("the port is missing (redis://HOST:PORT)");
    std::string_view host = rest.substr(0, colon);
    if (host.empty()) return Bad("the host is empty");
    for (char c : host) {
      if (!IsHostNameChar(c)) {
        return Bad("the host has a bad character (a host name holds letters, digits, '-', '.' and '_'; an IPv6 "
                   "address is written [ADDR])");
      }
    }
    out.host = std::string(host);
    port_text = rest.substr(colon + 1);
  }
  if (out.host.size() > kMaxHostBytes) return Bad("the host is longer than 253 bytes");
  KV_ASSIGN_OR_RETURN(out.port, ParsePort(port_text));
  return out;
}

std::string RedactedRedisUrl(const RedisUrl& url) {
  std::string out = "redis://";
  if (!url.password.empty()) out += Encode(url.user) + ":***@";
  bool v6 = url.host.find(':') != std::string::npos;
  out += v6 ? "[" + url.host + "]" : url.host;
  out += ':';
  out += std::to_string(url.port);
  return out;
}

std::string RedactCredentials(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t done = 0;
  for (size_t scheme = text.find("://"); scheme != std::string_view::npos; scheme = text.find("://", scheme + 3)) {
    const size_t start = scheme + 3;
    if (start < done) continue;
    // The authority: up to what cannot be in one (or ends a quoted URL).
    size_t end = text.find_first_of(" \t\r\n'\"`<>/", start);
    if (end == std::string_view::npos) end = text.size();
    const size_t at = text.substr(start, end - start).rfind('@');
    if (at == std::string_view::npos) continue;
    // USER:PASSWORD keeps USER; anything else before the '@' may be a
    // password on its own.
    const size_t colon = text.substr(start, at).find(':');
    const size_t secret = colon == std::string_view::npos ? start : start + colon + 1;
    out.append(text.substr(done, secret - done));
    out += "***";
    done = start + at;
  }
  out.append(text.substr(done));
  return out;
}

}  // namespace kvstore
