// SipHash (Aumasson and Bernstein), a keyed hash for hash tables that hold
// untrusted input (internal). With a secret key, input cannot be crafted so
// that its keys collide and every lookup degrades to a scan ("hash
// flooding"); std::hash has a fixed seed and no such guarantee.
//
// Thread safety: pure functions; ProcessSipKey may be called from any thread.
#ifndef KVSTORE_LIBKVSTORE_UTIL_SIPHASH_H_
#define KVSTORE_LIBKVSTORE_UTIL_SIPHASH_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvstore {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

// A key drawn from the operating system's random source once per process.
SipKey ProcessSipKey();

namespace siphash_internal {

inline uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline uint64_t LoadLe(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

struct State {
  uint64_t v0, v1, v2, v3;
  void Round() {
    v0 += v1, v1 = Rotl(v1, 13), v1 ^= v0, v0 = Rotl(v0, 32);
    v2 += v3, v3 = Rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = Rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = Rotl(v1, 17), v1 ^= v2, v2 = Rotl(v2, 32);
  }
  template <int kRounds>
  void Absorb(uint64_t m) {
    v3 ^= m;
    for (int r = 0; r < kRounds; ++r) Round();
    v0 ^= m;
  }
};

}  // namespace siphash_internal

// SipHash-c-d of `data` under `key`: c rounds per 8-byte word, d at the end.
template <int kCompressionRounds, int kFinalRounds>
uint64_t SipHash(SipKey key, std::string_view data) {
  siphash_internal::State s{0x736f6d6570736575ULL ^ key.k0, 0x646f72616e646f6dULL ^ key.k1,
                            0x6c7967656e657261ULL ^ key.k0, 0x7465646279746573ULL ^ key.k1};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const size_t n = data.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) s.Absorb<kCompressionRounds>(siphash_internal::LoadLe(p + i, 8));
  s.Absorb<kCompressionRounds>((uint64_t{n} << 56) | siphash_internal::LoadLe(p + i, n - i));
  s.v2 ^= 0xff;
  for (int r = 0; r < kFinalRounds; ++r) s.Round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

// SipHash-1-3, the variant Python and Rust use for their hash tables.
inline uint64_t SipHash13(SipKey key, std::string_view data) { return SipHash<1, 3>(key, data); }

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_SIPHASH_H_
