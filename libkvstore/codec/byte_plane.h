// Byte planes: the even bytes of a buffer followed by its odd bytes. For
// 16-bit floats this puts the sign/exponent bytes (few distinct values, very
// compressible) apart from the low mantissa bytes (near random), which lets
// zstd's entropy coder work on each separately (docs/format.md §6.2).
#ifndef KVSTORE_LIBKVSTORE_CODEC_BYTE_PLANE_H_
#define KVSTORE_LIBKVSTORE_CODEC_BYTE_PLANE_H_

#include <cstddef>
#include <span>

namespace kvstore {

// out = in[0], in[2], ... then in[1], in[3], ... (an odd trailing byte ends
// the first plane). REQUIRES: out.size() == in.size(), no overlap.
void SplitBytePlanes(std::span<const std::byte> in, std::span<std::byte> out);

// The inverse: in = two planes as SplitBytePlanes writes them.
// REQUIRES: out.size() == in.size(), no overlap.
void MergeBytePlanes(std::span<const std::byte> in, std::span<std::byte> out);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CODEC_BYTE_PLANE_H_
