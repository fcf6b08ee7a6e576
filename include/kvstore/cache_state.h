// CacheState and MetaState: the two trees a cache serialises to, exactly as
// mlx-lm's `state` and `meta_state` properties return them.
//
//   CacheState: None | Array | [CacheState, ...]
//     e.g. KVCache -> [keys, values]; QuantizedKVCache -> [[wq, s, b], [wq, s, b]];
//     ArraysCache -> [[slot0, None, slot2], left_padding, lengths];
//     CacheList -> [child0 state, child1 state, ...].
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

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }
  bool is_list() const { return std::holds_alternative<List>(v_); }

  // REQUIRES (asserted by std::get): the matching kind.
  const Array& array() const { return std::get<Array>(v_); }
  const List& list() const { return std::get<List>(v_); }
  List& list() { return std::get<List>(v_); }
  // List length; 0 for a leaf or None.
  size_t size() const { return is_list() ? list().size() : 0; }
  const CacheState& operator[](size_t i) const { return list()[i]; }

  // Total logical bytes of every array in the tree.
  size_t nbytes() const;

 private:
  std::variant<std::monostate, Array, List> v_;
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
