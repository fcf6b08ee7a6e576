// CacheState and MetaState: the two trees a cache serialises to, exactly as
// mlx-lm's `state` and `meta_state` properties return them.
//
//   CacheState: None | Array | int | bool | str | [CacheState, ...]
//     e.g. KVCache -> [keys, values]; QuantizedKVCache -> [[wq, s, b], [wq, s, b]];
//     ArraysCache -> [[slot0, None, slot2], left_padding, lengths];
//     CacheList -> [child0 state, child1 state, ...].
//   The int, bool and str leaves appear only in mlx-lm 0.32's state
//   (Cache::FullState): the raw buffers plus the scalars meta_state used to
//   carry, e.g. RotatingKVCache -> [keys, values, offset, keep, max_size, _idx],
//   CacheList -> [[child0 state, "KVCache"], ...].
//   MetaState: "string" | [MetaState, ...]
//     e.g. KVCache -> ""; RotatingKVCache -> ["keep", "max_size", "offset", "_idx"];
//     CacheList -> [["KVCache", "RotatingKVCache"], ["", ["0", "16", "10", "10"]]].
//
// The file layer flattens these trees into tensor names and metadata keys
// ("3.0.1", "0.3.1.2") and rebuilds them on load.
//
// Thread safety: values; const members are safe from many threads.
#ifndef KVSTORE_CACHE_STATE_H_
#define KVSTORE_CACHE_STATE_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kvstore/array.h"

namespace kvstore {

class CacheState {
 public:
  using List = std::vector<CacheState>;

  CacheState() = default;                                  // None
  CacheState(Array array) : v_(std::move(array)) {}        // NOLINT: a leaf
  CacheState(List items) : v_(std::move(items)) {}         // NOLINT: a list
  CacheState(std::initializer_list<CacheState> items) : v_(List(items)) {}
  static CacheState None() { return CacheState(); }
  // Python scalars of mlx-lm 0.32's state (a Python bool is not an int here).
  static CacheState Int(int64_t value) { return CacheState(Scalar{value, false}); }
  static CacheState Bool(bool value) { return CacheState(Scalar{value ? 1 : 0, true}); }
  static CacheState String(std::string value) { return CacheState(Text{std::move(value)}); }

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }
  bool is_list() const { return std::holds_alternative<List>(v_); }
  bool is_int() const { return std::holds_alternative<Scalar>(v_) && !std::get<Scalar>(v_).is_bool; }
  bool is_bool() const { return std::holds_alternative<Scalar>(v_) && std::get<Scalar>(v_).is_bool; }
  bool is_string() const { return std::holds_alternative<Text>(v_); }
  // An int, bool or str leaf.
  bool is_scalar() const { return std::holds_alternative<Scalar>(v_) || is_string(); }

  // REQUIRES (asserted by std::get): the matching kind.
  const Array& array() const { return std::get<Array>(v_); }
  const List& list() const { return std::get<List>(v_); }
  List& list() { return std::get<List>(v_); }
  int64_t int_value() const { return std::get<Scalar>(v_).value; }  // REQUIRES: is_int() or is_bool()
  bool bool_value() const { return std::get<Scalar>(v_).value != 0; }
  const std::string& str() const { return std::get<Text>(v_).value; }
  // List length; 0 for a leaf or None.
  size_t size() const { return is_list() ? list().size() : 0; }
  const CacheState& operator[](size_t i) const { return list()[i]; }

  // Total logical bytes of every array in the tree.
  size_t nbytes() const;

  // Debug form of a scalar or None leaf: 3, True, 'KVCache', None; "array"
  // or "list" otherwise.
  std::string DebugString() const;

 private:
  struct Scalar {
    int64_t value;
    bool is_bool;
    bool operator==(const Scalar&) const = default;
  };
  struct Text {
    std::string value;
    bool operator==(const Text&) const = default;
  };
  explicit CacheState(Scalar s) : v_(s) {}
  explicit CacheState(Text t) : v_(std::move(t)) {}
  std::variant<std::monostate, Array, List, Scalar, Text> v_;
};

class MetaState {
 public:
  using List = std::vector<MetaState>;

  MetaState() : v_(std::string()) {}                              // ""
  MetaState(std::string s) : v_(std::move(s)) {}                  // NOLINT
  MetaState(const char* s) : v_(std::string(s)) {}                // NOLINT
  MetaState(List items) : v_(std::move(items)) {}                 // NOLINT
  MetaState(std::initializer_list<MetaState> items) : v_(List(items)) {}
  // A list of string leaves, e.g. {"4", "32", "47", "14"}.
  static MetaState Strings(const std::vector<std::string>& items);

  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<List>(v_); }
  const std::string& str() const { return std::get<std::string>(v_); }
  const List& list() const { return std::get<List>(v_); }
  size_t size() const { return is_list() ? list().size() : 0; }
  const MetaState& operator[](size_t i) const { return list()[i]; }

  // Python truthiness: "" and [] are false, everything else true (the base
  // cache's meta setter accepts only falsy values).
  bool truthy() const;

  bool operator==(const MetaState& other) const { return v_ == other.v_; }
  bool operator!=(const MetaState& other) const { return !(*this == other); }

  // Debug form like Python's repr: ['4', '32', '47', '14'].
  std::string DebugString() const;

 private:
  std::variant<std::string, List> v_;
};

}  // namespace kvstore

#endif  // KVSTORE_CACHE_STATE_H_
