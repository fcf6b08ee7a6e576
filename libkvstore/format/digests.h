// What the SHA-256 digests of a prompt-cache file cover (docs/format.md §5.4):
//   * per tensor: the tensor's elements in row-major order (its bytes in the
//     data section), independent of where the data lies in the file;
//   * the header: canonical JSON of every tensor's dtype and shape and every
//     metadata entry except the two digest entries and the HMAC seal, keys
//     sorted.
#ifndef KVSTORE_LIBKVSTORE_FORMAT_DIGESTS_H_
#define KVSTORE_LIBKVSTORE_FORMAT_DIGESTS_H_

#include <map>
#include <string>
#include <vector>

#include "kvstore/safetensors.h"
#include "libkvstore/integrity/sha256.h"

namespace kvstore {

inline constexpr std::string_view kTensorDigestsMetaKey = "1.kvstore_sha256_tensors";
inline constexpr std::string_view kHeaderDigestMetaKey = "1.kvstore_sha256_header";
// Not covered by the header digest either: it seals the digests themselves.
inline constexpr std::string_view kHmacMetaKey = "1.kvstore_hmac_sha256";

// Canonical header text for (name, dtype, shape) entries and metadata.
std::string CanonicalHeader(const std::vector<TensorInfo>& tensors, const Metadata& metadata);

// {"name": "hex", ...} (sorted) and its inverse.
std::string DigestsToJson(const std::map<std::string, Sha256Digest>& digests);
Result<std::map<std::string, Sha256Digest>> DigestsFromJson(std::string_view json);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_DIGESTS_H_
