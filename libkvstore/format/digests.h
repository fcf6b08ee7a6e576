// What the digests of a prompt-cache file cover (docs/format.md §5.3-5.4),
// computed with the algorithm the file declares (SHA-256 when it declares
// none):
//   * per tensor: the tensor's elements in row-major order (its bytes in the
//     data section), independent of where the data lies in the file;
//   * the header: canonical JSON of every tensor's dtype and shape and every
//     metadata entry except the digest entries and the HMAC seal (the
//     algorithm's name is covered), keys sorted.
#ifndef KVSTORE_LIBKVSTORE_FORMAT_DIGESTS_H_
#define KVSTORE_LIBKVSTORE_FORMAT_DIGESTS_H_

#include <map>
#include <string>
#include <vector>

#include "kvstore/safetensors.h"
#include "kvstore/digest.h"
#include "kvstore/status.h"

namespace kvstore {

// The keys below are those of files in mlx-lm's user namespace "1."; a file
// in mlx-lm 0.32's layout keeps the same keys under "0." (DigestKeysFor).
// SHA-256 files without an algorithm entry (every file before XXH3) keep
// their digests under these keys.
inline constexpr std::string_view kTensorDigestsMetaKey = "1.kvstore_sha256_tensors";
inline constexpr std::string_view kHeaderDigestMetaKey = "1.kvstore_sha256_header";
// A file that names its algorithm keeps them under these.
inline constexpr std::string_view kDigestAlgorithmMetaKey = "1.kvstore_digest_algorithm";
inline constexpr std::string_view kAlgTensorDigestsMetaKey = "1.kvstore_digest_tensors";
inline constexpr std::string_view kAlgHeaderDigestMetaKey = "1.kvstore_digest_header";

// Where a file's digest entries are: full metadata keys.
struct DigestKeys {
  std::string tensors;
  std::string header;
  std::string algorithm;  // the algorithm entry
  std::string hmac;       // the seal
};
// SHA-256 files are written as before (no algorithm entry, the sha256 keys);
// other algorithms are named and use the generic keys. `user_prefix` is the
// layout's user namespace ("1.", or "0." for mlx-lm 0.32).
DigestKeys DigestKeysFor(DigestAlgorithm algorithm, std::string_view user_prefix = "1.");
// Any of the digest keys above (in either user namespace), not the algorithm.
bool IsDigestMetaKey(std::string_view key);
bool IsHmacMetaKey(std::string_view key);
// The algorithm the metadata declares: SHA-256 without an entry; Corruption
// naming an unknown one. `keys` gets where its digests are stored (in the
// user namespace of the metadata's layout).
Result<DigestAlgorithm> DeclaredDigestAlgorithm(const Metadata& metadata, DigestKeys* keys = nullptr);
// Not covered by the header digest either: it seals the digests themselves.
inline constexpr std::string_view kHmacMetaKey = "1.kvstore_hmac_sha256";

// Canonical header text for (name, dtype, shape) entries and metadata.
std::string CanonicalHeader(const std::vector<TensorInfo>& tensors, const Metadata& metadata);

// {"name": "hex", ...} (sorted) and its inverse.
std::string DigestsToJson(const std::map<std::string, Digest>& digests);
// Every digest must have `algorithm`'s length.
Result<std::map<std::string, Digest>> DigestsFromJson(std::string_view json, DigestAlgorithm algorithm);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_DIGESTS_H_
