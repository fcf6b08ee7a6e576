// Validation shared by the attention caches' state setters: keys/values
// pairs of rank-4 arrays [B, H, S, D] that agree in B, H and S.
#ifndef KVSTORE_LIBKVSTORE_CACHE_ATTENTION_STATE_H_
#define KVSTORE_LIBKVSTORE_CACHE_ATTENTION_STATE_H_

#include <string_view>

#include "kvstore/cache.h"

namespace kvstore {

// `state` must be a list of exactly two arrays (keys, values), rank 4, equal
// in dims 0..2, with a floating dtype. Errors name `cls` and the rule.
Status CheckKeysValuesState(std::string_view cls, const CacheState& state);

// keys/values passed to UpdateAndFetch: rank 4, equal in dims 0..2.
Status CheckKeysValuesUpdate(std::string_view cls, const Array& keys, const Array& values);

// Parses a meta_state integer the way Python's int() does for the strings
// mlx-lm writes (ParseInt64 with IntSyntax::kPython).
Result<int64_t> ParseMetaInt(std::string_view cls, std::string_view field, const MetaState& meta);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_ATTENTION_STATE_H_
