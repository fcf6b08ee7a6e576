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

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when invalid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace kvstore
