#include "libkvstore/cache/attention_state.h"

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
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(cls, k, v));
  if (!IsFloating(k.dtype()) || !IsFloating(v.dtype())) {
    return Bad(cls, "state arrays must be F16, BF16, F32 or F64, got " + k.Describe() + " and " +
                        v.Describe());
  }
  return Status::OK();
}

Result<int64_t> ParseMetaInt(std::string_view cls, std::string_view field, const MetaState& meta) {
  if (!meta.is_string()) {
    return Bad(cls, "meta_state field " + std::string(field) + " is not a string");
  }
  Result<int64_t> v = ParseInt64(meta.str(), IntSyntax::kPython);
  if (!v.ok()) return Bad(cls, "meta_state field " + std::string(field) + " " + std::string(v.status().message()));
  return v;
}

}  // namespace kvstore
