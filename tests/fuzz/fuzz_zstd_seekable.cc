// The seekable zstd reader must never crash or over-allocate on any bytes;
// declared sizes are capped before decompression buffers are sized.
#include <vector>

#include "kvstore/zstd_seekable.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  kvstore::ZstdReadLimits limits;
  limits.max_decompressed_size = 64 << 20;
  limits.max_frame_size = 16 << 20;
  auto reader = kvstore::ZstdSeekableReader::Open(bytes, limits);
  if (!reader.ok()) return 0;
  std::vector<std::byte> out(reader->decompressed_size());
  (void)reader->ReadAll(out, 1);
  if (out.size() > 3) {
    std::vector<std::byte> part(out.size() / 3);
    (void)reader->Read(out.size() / 3, part);
  }
  return 0;
}
