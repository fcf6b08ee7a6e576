// XXH3-128 (xxHash 0.8, libxxhash), a non-cryptographic 128-bit digest at
// memory speed. Internal: the digests of disk-tier and unsealed shared-tier
// files (docs/format.md §5.3-5.4). Digests are in canonical big-endian byte
// order, so their hex is what `xxhsum -H2` prints.
//
// Thread safety: an Xxh3Hasher is used by one thread at a time.
#ifndef KVSTORE_LIBKVSTORE_INTEGRITY_XXH3_H_
#define KVSTORE_LIBKVSTORE_INTEGRITY_XXH3_H_

#include <cstddef>
#include <memory>
#include <span>

#include "kvstore/digest.h"

namespace kvstore {

class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(Xxh3Hasher&&) noexcept;
  Xxh3Hasher& operator=(Xxh3Hasher&&) noexcept;

  void Update(std::span<const std::byte> data);
  // Returns the digest and resets the hasher for reuse.
  Digest Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

Digest Xxh3_128(std::span<const std::byte> data);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_INTEGRITY_XXH3_H_
