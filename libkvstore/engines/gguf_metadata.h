// The key/value metadata at the start of a GGUF file (version 2 or 3):
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv |
//   n_kv x (gguf_string key, u32 type, value)
//   gguf_string: u64 length, bytes; array: u32 element type, u64 count, elements
// Only the metadata is parsed; tensor infos and data that follow are not
// read. Scalars and strings are kept; of arrays only the element type, the
// count and (for integer arrays of up to kMaxKeptArray elements) the values.
#ifndef KVSTORE_LIBKVSTORE_ENGINES_GGUF_METADATA_H_
#define KVSTORE_LIBKVSTORE_ENGINES_GGUF_METADATA_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvstore/file_kind.h"  // kGgufMagic
#include "kvstore/status.h"

namespace kvstore::engines {

struct GgufValue {
  enum class Kind { kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kInt;
  int64_t i = 0;             // kInt (unsigned values above INT64_MAX are refused)
  double f = 0;              // kFloat
  bool b = false;            // kBool
  std::string s;             // kString
  uint32_t array_type = 0;   // kArray: GGUF element type
  uint64_t array_count = 0;
  std::vector<int64_t> ints;  // kArray of integers with at most kMaxKeptArray elements
};

inline constexpr uint64_t kMaxKeptArray = 4096;
// Keys are short in practice; a longer one is refused as corrupt.
inline constexpr uint64_t kMaxGgufKeyBytes = 65536;

struct GgufMetadata {
  uint32_t version = 0;
  std::vector<std::pair<std::string, GgufValue>> entries;  // file order

  const GgufValue* Find(std::string_view key) const;
  // The integer at `key`: nullopt when absent; InvalidArgument when not an
  // integer. An integer array whose elements are all equal gives that
  // element (per-layer counts); NotSupported when they differ.
  Result<std::optional<int64_t>> Int(std::string_view key) const;
  // The string at `key`, nullopt when absent or not a string.
  std::optional<std::string> String(std::string_view key) const;
};

// Corruption (naming the key or entry and the check) for a bad magic,
// truncation, an unknown value type, a nested array, a duplicate or overlong
// key, or a count that does not fit the remaining bytes; NotSupported for
// GGUF v1 or a big-endian file.
Result<GgufMetadata> ParseGgufMetadata(std::span<const std::byte> bytes);

}  // namespace kvstore::engines

#endif  // KVSTORE_LIBKVSTORE_ENGINES_GGUF_METADATA_H_
