// Json: a JSON value, used for safetensors headers, trace files and kvtool's
// --json output. Part of the public API: a server or tool that reads the
// metadata of a prompt-cache file or prints kvtool-style JSON uses it.
//
// Objects keep their members in insertion (file) order. Parsing is strict
// RFC 8259 (UTF-8 validated, no byte order mark, no comments, no NaN or
// Infinity, no trailing commas or data) and, by default, rejects duplicate
// object keys. Integers keep their exact value when they fit int64 or uint64;
// other numbers are doubles. Parsing never throws: errors come back as a
// Corruption Status naming the byte offset where the error was detected.
//
// Dump() writes the bytes nlohmann::json::dump() writes (the serializer MLX
// uses for safetensors headers): compact without whitespace, or indented;
// strings as raw UTF-8 with '"', '\\' and control characters escaped, and
// U+FFFD in place of each invalid UTF-8 sequence; doubles in
// nlohmann's shortest round-trip form; NaN and Infinity as null.
//
// Thread safety: a value; const members are safe from many threads.
#ifndef KVSTORE_JSON_H_
#define KVSTORE_JSON_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kvstore/status.h"

namespace kvstore {

class Json {
 public:
  enum class Type { kNull, kBool, kInt, kUint, kDouble, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  Json() = default;  // null
  Json(std::nullptr_t) {}  // NOLINT
  Json(bool b) : v_(b) {}  // NOLINT
  Json(int v) : v_(int64_t{v}) {}  // NOLINT
  Json(int64_t v) : v_(v) {}  // NOLINT
  // Stored as kInt when it fits int64, else kUint.
  Json(uint64_t v);  // NOLINT
  Json(double v) : v_(v) {}  // NOLINT
  Json(const char* s) : v_(std::string(s)) {}  // NOLINT
  Json(std::string s) : v_(std::move(s)) {}  // NOLINT
  Json(std::string_view s) : v_(std::string(s)) {}  // NOLINT
  Json(Array a) : v_(std::move(a)) {}  // NOLINT
  Json(Object o) : v_(std::move(o)) {}  // NOLINT

  static Json MakeArray() { return Json(Array{}); }
  static Json MakeObject() { return Json(Object{}); }

  Type type() const;
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  // kInt or kUint.
  bool is_integer() const { return type() == Type::kInt || type() == Type::kUint; }
  bool is_number() const { return is_integer() || type() == Type::kDouble; }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }

  // REQUIRES (asserted): the matching type.
  bool as_bool() const;
  int64_t as_int() const;    // kInt only
  uint64_t as_uint() const;  // kUint, or kInt >= 0
  double as_double() const;  // any number
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object lookup (first member with that key), nullptr when absent or when
  // this is not an object.
  const Json* Find(std::string_view key) const;
  // Object member access, inserting null when absent. REQUIRES: object.
  Json& operator[](std::string_view key);
  // Appends to an array. REQUIRES: array.
  void Push(Json value);
  // Number of array elements or object members; 0 otherwise.
  size_t size() const;

  bool operator==(const Json& other) const;
  bool operator!=(const Json& other) const { return !(*this == other); }

  struct ParseOptions {
    bool reject_duplicate_keys = true;
    size_t max_depth = 64;  // nested arrays and objects; deeper input is Corruption
  };
  static Result<Json> Parse(std::string_view text, const ParseOptions& options);
  static Result<Json> Parse(std::string_view text) { return Parse(text, ParseOptions{}); }

  struct DumpOptions {
    int indent = -1;         // < 0: compact
    bool sort_keys = false;  // bytewise key order (what nlohmann's std::map gives)
  };
  // Members with the same key (possible only in values built by hand or
  // parsed with reject_duplicate_keys = false) are all written, in order.
  std::string Dump(const DumpOptions& options) const;
  std::string Dump() const { return Dump(DumpOptions{}); }

 private:
  std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, Array, Object> v_;
};

}  // namespace kvstore

#endif  // KVSTORE_JSON_H_
