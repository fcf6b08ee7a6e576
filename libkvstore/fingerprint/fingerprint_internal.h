// Internals of ModelFingerprint shared by its two implementation files: the
// state behind the value, the canonical JSON, and the validation of a spec.
#ifndef KVSTORE_LIBKVSTORE_FINGERPRINT_FINGERPRINT_INTERNAL_H_
#define KVSTORE_LIBKVSTORE_FINGERPRINT_FINGERPRINT_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kvstore/json.h"
#include "kvstore/model_fingerprint.h"

namespace kvstore {

struct ModelFingerprint::Impl {
  ModelSpec spec;
  std::string json;
  Sha256Digest digest;
};

inline constexpr std::string_view kFingerprintFormat = "kvstore-fingerprint/1";
// A JSON integer within int64_t, whether the parser made it signed or not.
inline std::optional<int64_t> AsInt64(const Json& v) {
  if (v.type() == Json::Type::kInt) return v.as_int();
  if (v.type() == Json::Type::kUint && v.as_uint() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(v.as_uint());
  }
  return std::nullopt;
}

// Deeper CacheList nesting is refused (as in prompt-cache files).
inline constexpr int kMaxSpecDepth = 8;

// The canonical JSON object of one layer / of the whole spec.
Json CacheSpecToJson(const CacheSpec& spec);
Json ModelSpecToJson(const ModelSpec& spec);
// The spec a JSON object describes; Corruption naming `where` when malformed.
Result<CacheSpec> CacheSpecFromJson(const Json& j, const std::string& where, int depth);

// The first difference between two layer specs ("layer 3 (RotatingKVCache):
// max_size 4096 != 1024"), `where` naming the layer; empty when equal.
std::string CacheSpecDifference(const CacheSpec& a, const CacheSpec& b, const std::string& where);

// InvalidArgument naming `where` ("layer 3.1") when the spec is not one a
// cache of its class can have.
Status ValidateCacheSpec(const CacheSpec& spec, const std::string& where, int depth);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FINGERPRINT_FINGERPRINT_INTERNAL_H_
