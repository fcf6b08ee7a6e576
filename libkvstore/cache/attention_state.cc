#include "libkvstore/cache/attention_state.h"

#include <algorithm>
#include <string>

#include "libkvstore/util/parse_int.h"

namespace kvstore {

namespace {
Status Bad(std::string_view cls, const std::string& rule) {
  return Status::InvalidArgument(std::string(cls) + ": " + rule);
}
}  // namespace

Status CheckKeysValuesUpdate(std::string_view cls, const Array& keys, const Array& values) {
  if (!keys.defined() || !values.defined()) return Bad(cls, "keys and values must be arrays");
  if (keys.ndim() != 4 || values.ndim() != 4) {
    return Bad(cls, "keys " + keys.Describe() + " and values " + values.Describe() +
                        " must have rank 4 [B, H, S, D]");
  }
  for (int axis = 0; axis < 3; ++axis) {
    if (keys.dim(axis) != values.dim(axis)) {
      return Bad(cls, "keys " + keys.Describe() + " and values " + values.Describe() +
                          " disagree in dimension " + std::to_string(axis));
    }
  }
  if (!IsFloating(keys.dtype()) || !IsFloating(values.dtype())) {
    return Bad(cls, "keys and values must be F16, BF16, F32 or F64, got " + keys.Describe() +
                        " and " + values.Describe());
  }
  return Status::OK();
}

Status CheckKeysValuesState(std::string_view cls, const CacheState& state) {
  if (!state.is_list() || state.size() != 2) {
    return Bad(cls, "state must be a list of 2 arrays (keys, values), got " +
                        std::to_string(state.size()) + " entries");
  }
  if (!state[0].is_array() || !state[1].is_array()) {
    return Bad(cls, "state entries must be arrays");
  }
  const Array& k = state[0].array();
  const Array& v = state[1].array();
  return CheckKeysValuesUpdate(cls, k, v);
}

Result<int64_t> TrimCount(std::string_view cls, int64_t n, int64_t available) {
  if (n < 0) return Bad(cls, "trim by a negative count " + std::to_string(n));
  return std::max<int64_t>(0, std::min(n, available));
}

Result<int64_t> ParseMetaInt(std::string_view cls, std::string_view field, const MetaState& meta) {
  if (!meta.is_string()) {
    return Bad(cls, "meta_state field " + std::string(field) + " is not a string");
  }
  Result<int64_t> v = ParseInt64(meta.str(), IntSyntax::kPython);
  if (!v.ok()) return Bad(cls, "meta_state field " + std::string(field) + " " + std::string(v.status().message()));
  return v;
}

Result<std::vector<int64_t>> ParseMetaInts(std::string_view cls, const MetaState& meta,
                                           std::initializer_list<std::string_view> fields) {
  if (!meta.is_list() || meta.size() != fields.size()) {
    std::string names;
    for (std::string_view f : fields) names += (names.empty() ? "" : ", ") + std::string(f);
    return Bad(cls, "meta_state must be [" + names + "]");
  }
  std::vector<int64_t> out;
  for (std::string_view f : fields) {
    KV_ASSIGN_OR_RETURN(int64_t v, ParseMetaInt(cls, f, meta[out.size()]));
    out.push_back(v);
  }
  return out;
}

Status UnknownShapes(const Cache& cache, const std::string& why) {
  return Status::NotSupported(std::string(cache.class_name()) + " " + why + ": its shapes are unknown");
}

std::optional<TokenRows> LeadingRows(const CacheState& state, int64_t first, int64_t count) {
  if (count < 0 || count > state[0].array().dim(2) || count > state[1].array().dim(2)) return std::nullopt;
  return TokenRows{first, count, {state[0].array().Slice(2, 0, count), state[1].array().Slice(2, 0, count)}};
}

Status CheckFullState(std::string_view cls, const CacheState& state,
                      std::initializer_list<std::string_view> fields) {
  if (state.is_list() && state.size() == fields.size()) return Status::OK();
  std::string names;
  for (std::string_view f : fields) names += (names.empty() ? "" : ", ") + std::string(f);
  return Status::InvalidArgument(std::string(cls) + ": mlx-lm 0.32 state must be [" + names + "], got " +
                                 (state.is_list() ? std::to_string(state.size()) + " entries" : state.DebugString()));
}

Result<int64_t> FullStateInt(std::string_view cls, std::string_view field, const CacheState& entry) {
  if (entry.is_int()) return entry.int_value();
  return Status::InvalidArgument(std::string(cls) + ": mlx-lm 0.32 state " + std::string(field) +
                                 " must be an int, got " + entry.DebugString());
}

}  // namespace kvstore
