// Validation shared by the caches: keys/values pairs of rank-4 float arrays
// [B, H, S, D] that agree in B, H and S; trim counts; meta_state integers;
// and the helpers of DescribeSpec / RowsByPosition those classes share.
#ifndef KVSTORE_LIBKVSTORE_CACHE_ATTENTION_STATE_H_
#define KVSTORE_LIBKVSTORE_CACHE_ATTENTION_STATE_H_

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore {

// keys/values passed to UpdateAndFetch: rank 4, equal in dims 0..2, with a
// floating dtype. Errors name `cls` and the rule.
Status CheckKeysValuesUpdate(std::string_view cls, const Array& keys, const Array& values);

// `state` must be a list of exactly two arrays (keys, values) that pass
// CheckKeysValuesUpdate.
Status CheckKeysValuesState(std::string_view cls, const CacheState& state);

// The count trim(n) removes from `available` positions: min(n, available),
// never negative. InvalidArgument naming `cls` for a negative n.
Result<int64_t> TrimCount(std::string_view cls, int64_t n, int64_t available);

// Parses a meta_state integer the way Python's int() does for the strings
// mlx-lm writes (ParseInt64 with IntSyntax::kPython).
Result<int64_t> ParseMetaInt(std::string_view cls, std::string_view field, const MetaState& meta);

// A meta_state that is the list [fields...] of integers (ParseMetaInt each),
// e.g. RotatingKVCache's [keep, max_size, offset, _idx].
Result<std::vector<int64_t>> ParseMetaInts(std::string_view cls, const MetaState& meta,
                                           std::initializer_list<std::string_view> fields);

// ---- mlx-lm 0.32's state (Cache::FullState) ----
// `state` must be a list of exactly `fields.size()` entries, named in the
// error ("KVCache: mlx-lm 0.32 state must be [keys, values, offset]").
Status CheckFullState(std::string_view cls, const CacheState& state,
                      std::initializer_list<std::string_view> fields);
// The Python int `entry` (a bool is not accepted where an int belongs).
Result<int64_t> FullStateInt(std::string_view cls, std::string_view field, const CacheState& entry);

// NotSupported("<class> <why>: its shapes are unknown"), for DescribeSpec.
Status UnknownShapes(const Cache& cache, const std::string& why);

// The rows [0, count) of a [keys, values] state as positions first..,
// or nullopt when count is negative or exceeds what the arrays hold.
std::optional<TokenRows> LeadingRows(const CacheState& state, int64_t first, int64_t count);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_ATTENTION_STATE_H_
