#include "libkvstore/integrity/xxh3.h"

#include <new>

#include <xxhash.h>
#if defined(__x86_64__)
// The x86 builds of libxxhash (Debian's included) export runtime-dispatched
// variants (AVX-512, AVX2, SSE2, as xxhsum uses); the plain entry points run
// the SSE2 baseline, about half as fast. This header renames the calls below.
#include <xxh_x86dispatch.h>
#endif

namespace kvstore {
namespace {

Digest Canonical(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return Digest(DigestAlgorithm::kXxh3_128,
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(c.digest), sizeof(c.digest)));
}

}  // namespace

struct Xxh3Hasher::Impl {
  XXH3_state_t* state = nullptr;
  Impl() : state(XXH3_createState()) {
    if (state == nullptr) throw std::bad_alloc();
    XXH3_128bits_reset(state);
  }
  ~Impl() { XXH3_freeState(state); }
};

Xxh3Hasher::Xxh3Hasher() : impl_(std::make_unique<Impl>()) {}
Xxh3Hasher::~Xxh3Hasher() = default;
Xxh3Hasher::Xxh3Hasher(Xxh3Hasher&&) noexcept = default;
Xxh3Hasher& Xxh3Hasher::operator=(Xxh3Hasher&&) noexcept = default;

void Xxh3Hasher::Update(std::span<const std::byte> data) {
  if (!data.empty()) XXH3_128bits_update(impl_->state, data.data(), data.size());
}

Digest Xxh3Hasher::Finish() {
  const Digest d = Canonical(XXH3_128bits_digest(impl_->state));
  XXH3_128bits_reset(impl_->state);
  return d;
}

Digest Xxh3_128(std::span<const std::byte> data) { return Canonical(XXH3_128bits(data.data(), data.size())); }

}  // namespace kvstore
