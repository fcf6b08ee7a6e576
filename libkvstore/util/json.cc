// Json values, and UTF-8 validation. Text in and out is in json_text.cc.
#include <cassert>
#include <limits>

#include "kvstore/json.h"
#include "libkvstore/util/json_text.h"

namespace kvstore {

Json::Json(uint64_t v) {
  if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    v_ = static_cast<int64_t>(v);
  } else {
    v_ = v;
  }
}

Json::Type Json::type() const { return static_cast<Type>(v_.index()); }

bool Json::as_bool() const { return std::get<bool>(v_); }
int64_t Json::as_int() const { return std::get<int64_t>(v_); }
uint64_t Json::as_uint() const {
  if (type() == Type::kInt) {
    assert(std::get<int64_t>(v_) >= 0);
    return static_cast<uint64_t>(std::get<int64_t>(v_));
  }
  return std::get<uint64_t>(v_);
}
double Json::as_double() const {
  switch (type()) {
    case Type::kInt: return static_cast<double>(std::get<int64_t>(v_));
    case Type::kUint: return static_cast<double>(std::get<uint64_t>(v_));
    default: return std::get<double>(v_);
  }
}
const std::string& Json::as_string() const { return std::get<std::string>(v_); }
const Json::Array& Json::as_array() const { return std::get<Array>(v_); }
Json::Array& Json::as_array() { return std::get<Array>(v_); }
const Json::Object& Json::as_object() const { return std::get<Object>(v_); }
Json::Object& Json::as_object() { return std::get<Object>(v_); }

const Json* Json::Find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const Member& m : as_object()) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

Json& Json::operator[](std::string_view key) {
  Object& obj = as_object();
  for (Member& m : obj) {
    if (m.first == key) return m.second;
  }
  obj.emplace_back(std::string(key), Json());
  return obj.back().second;
}

void Json::Push(Json value) { as_array().push_back(std::move(value)); }

size_t Json::size() const {
  if (is_array()) return as_array().size();
  if (is_object()) return as_object().size();
  return 0;
}

bool Json::operator==(const Json& other) const { return v_ == other.v_; }

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0, len; i < s.size(); i += len) {
    const auto c = static_cast<unsigned char>(s[i]);
    len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                       : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > s.size() - i) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);  // the lead byte's payload
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    // No overlong forms, nothing past U+10FFFF, no surrogates.
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  }
  return true;
}

}  // namespace kvstore
