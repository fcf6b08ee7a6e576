#include "libkvstore/codec/byte_plane.h"

#include <cassert>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvstore {

void SplitBytePlanes(std::span<const std::byte> in, std::span<std::byte> out) {
  assert(in.size() == out.size());
  const size_t pairs = in.size() / 2;
  const auto* src = reinterpret_cast<const uint8_t*>(in.data());
  auto* even = reinterpret_cast<uint8_t*>(out.data());
  uint8_t* odd = even + (in.size() - pairs);  // the first plane gets an odd trailing byte
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i low = _mm_set1_epi16(0x00FF);
  for (; i + 16 <= pairs; i += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i + 16));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(even + i),
                     _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(odd + i),
                     _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
  }
#endif
  for (; i < pairs; ++i) {
    even[i] = src[2 * i];
    odd[i] = src[2 * i + 1];
  }
  if (in.size() % 2 != 0) even[pairs] = src[in.size() - 1];
}

void MergeBytePlanes(std::span<const std::byte> in, std::span<std::byte> out) {
  assert(in.size() == out.size());
  const size_t pairs = out.size() / 2;
  const auto* even = reinterpret_cast<const uint8_t*>(in.data());
  const uint8_t* odd = even + (in.size() - pairs);
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= pairs; i += 16) {
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(even + i));
    const __m128i o = _mm_loadu_si128(reinterpret_cast<const __m128i*>(odd + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm_unpacklo_epi8(e, o));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i + 16), _mm_unpackhi_epi8(e, o));
  }
#endif
  for (; i < pairs; ++i) {
    dst[2 * i] = even[i];
    dst[2 * i + 1] = odd[i];
  }
  if (out.size() % 2 != 0) dst[out.size() - 1] = even[pairs];
}

}  // namespace kvstore
