// JSON text helpers for the safetensors reader and writer (internal).
#ifndef KVSTORE_LIBKVSTORE_UTIL_JSON_TEXT_H_
#define KVSTORE_LIBKVSTORE_UTIL_JSON_TEXT_H_

#include <string>
#include <string_view>

namespace kvstore {

// Appends `s` as a JSON string literal (quotes included), escaped as
// Json::Dump escapes strings.
void AppendJsonString(std::string& out, std::string_view s);

// True when `s` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_JSON_TEXT_H_
