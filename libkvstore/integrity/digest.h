// Computing a file digest (kvstore/digest.h) with the algorithm a file
// declares: SHA-256 (sha256.h) or XXH3-128 (xxh3.h).
#ifndef KVSTORE_LIBKVSTORE_INTEGRITY_DIGEST_H_
#define KVSTORE_LIBKVSTORE_INTEGRITY_DIGEST_H_

#include <span>
#include <string_view>

#include "kvstore/digest.h"

namespace kvstore {

class Array;

Digest ComputeDigest(DigestAlgorithm algorithm, std::span<const std::byte> data);
Digest ComputeDigest(DigestAlgorithm algorithm, std::string_view data);
// Of an array's logical elements in row-major order, whatever its strides.
Digest ComputeDigest(DigestAlgorithm algorithm, const Array& array);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_INTEGRITY_DIGEST_H_
