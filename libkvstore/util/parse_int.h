// ParseInt64: the one parser for integers written as text in prompt-cache
// files (meta_state entries, mlx-swift-lm's counts and comma-separated
// lists, indices in tensor names).
#ifndef KVSTORE_LIBKVSTORE_UTIL_PARSE_INT_H_
#define KVSTORE_LIBKVSTORE_UTIL_PARSE_INT_H_

#include <cstdint>
#include <string_view>

#include "kvstore/status.h"

namespace kvstore {

enum class IntSyntax {
  kStrict,  // an optional '-' and decimal digits, nothing else
  // What Python's int() accepts of what mlx-lm writes with str(): also
  // surrounding whitespace and a leading '+' (mlx-lm reads meta_state with int()).
  kPython,
};

// The value of the whole of `text`. InvalidArgument quoting the text (at
// most 40 characters of it): "\"abc\" is not an integer", or "... is not an
// integer in the int64 range" for a value beyond int64.
Result<int64_t> ParseInt64(std::string_view text, IntSyntax syntax = IntSyntax::kStrict);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_PARSE_INT_H_
