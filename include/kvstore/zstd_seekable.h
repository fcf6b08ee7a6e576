// zstd seekable container: independent zstd frames plus a seek table in a
// trailing skippable frame (the layout of zstd's contrib "seekable format").
//
// `zstd -d` on such a file gives back the byte-exact original (it
// decompresses the frames in order and skips the skippable frame), while we
// can decompress any byte range by touching only the frames that cover it,
// and decompress or compress frames on all cores. Every frame carries zstd's
// content checksum and its exact decompressed size.
//
// Layout (docs/format.md §6):
//   frame 0 .. frame n-1          standard zstd frames (content size + checksum)
//   skippable frame 0x184D2A5E    seek table: n x {u32 compressed, u32 decompressed}
//                                 then u32 n, u8 descriptor (0), u32 0x8F92EAB1
//
// Codecs: kZstd frames hold the plain bytes. kBytePlane (docs/format.md
// §6.2) prefixes the first frame's content with the 8-byte magic
// "KVBP\x01\x02\0\0" and stores every later frame as its even bytes followed
// by its odd bytes, which compresses 16-bit floats better. `zstd -d` on such
// a file yields the magic followed by shuffled bytes; every safetensors
// reader refuses that (the magic read as a header length is ~2.2e12), so it
// is never silently misread.
//
// Thread safety: a writer is used by one thread (it compresses on the
// library's thread pool); a reader is immutable after Open and may be used
// from many threads.
#ifndef KVSTORE_ZSTD_SEEKABLE_H_
#define KVSTORE_ZSTD_SEEKABLE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvstore/env.h"
#include "kvstore/status.h"

namespace kvstore {

// True when `prefix` starts with the zstd frame magic (0xFD2FB528).
bool IsZstdFrame(std::span<const std::byte> prefix);
// True when `file` ends with the seekable format's footer magic
// (0x8F92EAB1): kvstore's container, not a stream the zstd tool writes.
bool HasSeekTableFooter(std::span<const std::byte> file);
// True when `prefix` starts with the byte-plane magic "KVBP" 01 02 00 00:
// the content of a byte-plane container, as `zstd -d` unpacks it.
bool IsBytePlaneContent(std::span<const std::byte> prefix);

enum class ZstdCodec { kZstd, kBytePlane };
// The codec's name as files and reports spell it: "zstd", "zstd-byteplane".
std::string_view ZstdCodecName(ZstdCodec codec);
// A codec from its name: ZstdCodecName's, or "byteplane" (what kvtool's
// --codec and Python's codec= take). nullopt for any other string.
std::optional<ZstdCodec> ParseZstdCodec(std::string_view name);
// The level a codec writes at when none is asked for: 3 for kZstd, 1 for
// kBytePlane, which on 16-bit floats is both smaller and faster at level 1
// than at 3 (docs/performance.md).
int DefaultZstdLevel(ZstdCodec codec);

// The compression levels the linked libzstd takes (negative levels are
// faster), and InvalidArgument naming that range for any other level.
struct ZstdLevelRange {
  int min;
  int max;
};
ZstdLevelRange ZstdLevels();
Status CheckZstdLevel(int level);

struct ZstdWriteOptions {
  int level = 3;                          // zstd level (negative = faster), in ZstdLevels()
  size_t frame_size = size_t{4} << 20;    // bytes of input per data frame
  int threads = 0;                        // 0 = all cores
  ZstdCodec codec = ZstdCodec::kZstd;
};

// Streams input into frames. Memory: about 2 x threads x frame_size.
class ZstdSeekableWriter {
 public:
  // `out` must outlive the writer.
  ZstdSeekableWriter(WritableFile* out, const ZstdWriteOptions& options);
  ~ZstdSeekableWriter();
  ZstdSeekableWriter(const ZstdSeekableWriter&) = delete;
  ZstdSeekableWriter& operator=(const ZstdSeekableWriter&) = delete;

  Status Append(std::span<const std::byte> data);
  // Ends the current frame (if it holds bytes), so the next byte starts a
  // new frame: used to keep a file's header in a frame of its own.
  Status EndFrame();
  // Writes `content` as the first frame, stored in raw (uncompressed) zstd
  // blocks, so that its size depends only on content.size() and it can be
  // replaced later by RawFrame() of new content of the same length (a file
  // header written before the digests it carries are known).
  // FailedPrecondition unless it is the first thing appended.
  Status AppendRawFrame(std::span<const std::byte> content);
  // The bytes AppendRawFrame writes for `content` (with this writer's codec).
  std::vector<std::byte> RawFrame(std::span<const std::byte> content) const;
  // Ends the last frame and writes the seek table. No Append after Finish.
  Status Finish();

  uint64_t frames() const;
  uint64_t compressed_bytes() const;
  uint64_t uncompressed_bytes() const;

 private:
  struct Impl;  // frames being filled, compressed and written (zstd_seekable.cc)
  std::unique_ptr<Impl> impl_;
};

struct ZstdReadLimits {
  uint64_t max_decompressed_size = uint64_t{1} << 40;  // 1 TiB in total
  uint64_t max_frame_size = uint64_t{1} << 30;         // 1 GiB per frame
  uint64_t max_frames = uint64_t{1} << 24;
};

// A parsed seekable file. The bytes must outlive the reader (keep the
// ReadableFile alive).
class ZstdSeekableReader {
 public:
  // Offsets and sizes of the original (for kBytePlane: without the magic).
  struct Frame {
    uint64_t compressed_offset;
    uint32_t compressed_size;
    uint64_t decompressed_offset;
    uint32_t decompressed_size;
  };

  // Validates the seek table against the file (frames tile the bytes before
  // it exactly; declared sizes within limits). Corruption on any mismatch,
  // ResourceExhausted when a declared size exceeds a limit.
  static Result<ZstdSeekableReader> Open(std::span<const std::byte> file,
                                         const ZstdReadLimits& limits = {});
  // As above over file.data(); each frame's compressed bytes are then read
  // with file.ReadAt into a buffer the thread reuses (kvstore/env.h says why).
  static Result<ZstdSeekableReader> Open(const ReadableFile& file, const ZstdReadLimits& limits = {});

  uint64_t decompressed_size() const { return decompressed_size_; }
  const std::vector<Frame>& frames() const { return frames_; }
  ZstdCodec codec() const { return codec_; }

  // Decompresses bytes [offset, offset + out.size()) of the original,
  // touching only the frames that cover them, on up to `threads` workers.
  Status Read(uint64_t offset, std::span<std::byte> out, int threads = 1) const;
  // Decompresses frame `index` into `out` (frames()[index].decompressed_size bytes).
  Status ReadFrame(size_t index, std::span<std::byte> out) const;
  // Decompresses everything into `out` (decompressed_size() bytes) using
  // `threads` workers (0 = all cores).
  Status ReadAll(std::span<std::byte> out, int threads = 0) const;

 private:
  Status DetectCodec();
  // Decompresses a frame's stored content (for kBytePlane: planes, or the
  // magic then the header) into `content`.
  Status DecompressContent(size_t index, std::span<std::byte> content) const;

  std::span<const std::byte> file_;
  const ReadableFile* source_ = nullptr;  // file_'s file, when opened over one
  std::vector<Frame> frames_;
  uint64_t decompressed_size_ = 0;
  ZstdCodec codec_ = ZstdCodec::kZstd;
};

}  // namespace kvstore

#endif  // KVSTORE_ZSTD_SEEKABLE_H_
