#include "kvstore/zstd_seekable.h"

#include <zstd.h>

#include <cstring>
#include <string>

#include "libkvstore/codec/byte_plane.h"
#include "libkvstore/util/parallel.h"

namespace kvstore {
namespace {

constexpr uint32_t kZstdMagic = 0xFD2FB528u;
constexpr uint32_t kSkippableMagic = 0x184D2A5Eu;  // the seekable format's skippable variant
constexpr uint32_t kSeekableMagic = 0x8F92EAB1u;
constexpr size_t kFooterSize = 9;       // u32 frames, u8 descriptor, u32 magic
constexpr size_t kEntrySize = 8;        // u32 compressed, u32 decompressed (no checksums)
constexpr size_t kMaxFrameInput = size_t{1} << 30;
// First content bytes of a byte-plane file: "KVBP", version 1, 2 planes.
constexpr std::byte kBytePlaneMagic[8] = {std::byte{'K'}, std::byte{'V'}, std::byte{'B'}, std::byte{'P'},
                                          std::byte{1},   std::byte{2},   std::byte{0},   std::byte{0}};
constexpr size_t kMagicSize = sizeof(kBytePlaneMagic);

uint32_t LoadU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void StoreU32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}

Status ZstdError(std::string_view what, size_t code) {
  return Status::Corruption("zstd: " + std::string(what) + ": " + ZSTD_getErrorName(code));
}

}  // namespace

bool IsZstdFrame(std::span<const std::byte> prefix) {
  return prefix.size() >= 4 && LoadU32(prefix.data()) == kZstdMagic;
}

bool HasSeekTableFooter(std::span<const std::byte> file) {
  return file.size() >= kFooterSize && LoadU32(file.data() + file.size() - 4) == kSeekableMagic;
}

bool IsBytePlaneContent(std::span<const std::byte> prefix) {
  return prefix.size() >= kMagicSize && std::memcmp(prefix.data(), kBytePlaneMagic, kMagicSize) == 0;
}

ZstdLevelRange ZstdLevels() { return {ZSTD_minCLevel(), ZSTD_maxCLevel()}; }

Status CheckZstdLevel(int level) {
  const ZstdLevelRange r = ZstdLevels();
  if (level >= r.min && level <= r.max) return Status::OK();
  return Status::InvalidArgument("zstd level " + std::to_string(level) + " outside [" + std::to_string(r.min) +
                                 ", " + std::to_string(r.max) + "]");
}

std::string_view ZstdCodecName(ZstdCodec codec) {
  return codec == ZstdCodec::kBytePlane ? "zstd-byteplane" : "zstd";
}

std::optional<ZstdCodec> ParseZstdCodec(std::string_view name) {
  if (name == "zstd") return ZstdCodec::kZstd;
  if (name == "byteplane" || name == "zstd-byteplane") return ZstdCodec::kBytePlane;
  return std::nullopt;
}

int DefaultZstdLevel(ZstdCodec codec) { return codec == ZstdCodec::kBytePlane ? 1 : 3; }

// ---- Writer ----

namespace {

constexpr size_t kMaxRawBlock = size_t{128} << 10;  // zstd's Block_Maximum_Size

// One compression context per thread, reused: creating one per frame costs
// megabytes of fresh tables (allocation and page faults) each time.
struct CCtxHolder {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ~CCtxHolder() { ZSTD_freeCCtx(cctx); }
};

// Compresses `in` into `out` (grown to the bound, never shrunk, so a reused
// buffer is neither reallocated nor zero-filled again); *size = bytes used.
Status CompressFrame(std::vector<std::byte>& in, bool split, std::vector<std::byte>& out, size_t* size, int level) {
  if (split) {
    thread_local std::vector<std::byte> planes;
    planes.resize(in.size());
    SplitBytePlanes(in, planes);
    in.swap(planes);
  }
  if (out.size() < ZSTD_compressBound(in.size())) out.resize(ZSTD_compressBound(in.size()));
  thread_local CCtxHolder holder;
  ZSTD_CCtx* cctx = holder.cctx;
  if (cctx == nullptr) return Status::ResourceExhausted("zstd: cannot create a context");
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(n)) return ZstdError("compress", n);
  *size = n;
  return Status::OK();
}

// Frames compressed together, on the pool, while the previous batch is written.
struct Batch {
  std::vector<std::vector<std::byte>> input;
  std::vector<bool> split;                     // byte-plane transform per frame
  std::vector<std::vector<std::byte>> output;  // compressBound bytes each (reused)
  std::vector<size_t> output_size;             // bytes of each output in use
  Status compressed;                           // when compressed on the writer's thread
  TaskPool::Pending<Status> compressing;       // when compressed on the pool

  Status Compress(int threads, int level) {
    return ParallelFor(input.size(), threads, [&](size_t i) {
      return CompressFrame(input[i], split[i], output[i], &output_size[i], level);
    });
  }
  Status Wait() { return compressing.valid() ? compressing.Get() : compressed; }
};

}  // namespace

struct ZstdSeekableWriter::Impl {
  struct Entry {
    uint32_t compressed;
    uint32_t decompressed;
  };

  Impl(WritableFile* file, const ZstdWriteOptions& o) : out(file), options(o) {}
  Status EndFrame();
  // Starts compressing the pending frames in the background and writes the
  // previous batch meanwhile (compression overlaps the writes).
  Status FlushPending(bool all);
  Status WriteBatch(Batch& batch);
  std::vector<std::byte> RawFrame(std::span<const std::byte> content) const;

  WritableFile* out;
  ZstdWriteOptions options;
  std::vector<std::byte> current;
  bool current_started = false;  // current holds a frame being filled
  uint64_t frames_started = 0;
  std::vector<std::vector<std::byte>> pending;        // full frames not yet compressed
  std::vector<bool> pending_split;                    // byte-plane transform per pending frame
  std::vector<std::vector<std::byte>> spare;          // input buffers of written frames, for reuse
  std::vector<std::vector<std::byte>> spare_output;   // their compressed buffers, likewise
  std::shared_ptr<Batch> in_flight;
  std::vector<Entry> entries;
  uint64_t compressed_bytes = 0;
  uint64_t uncompressed_bytes = 0;
  Status status;
  bool finished = false;
};

ZstdSeekableWriter::ZstdSeekableWriter(WritableFile* out, const ZstdWriteOptions& options)
    : impl_(std::make_unique<Impl>(out, options)) {
  ZstdWriteOptions& o = impl_->options;
  if (o.frame_size == 0 || o.frame_size > kMaxFrameInput) o.frame_size = size_t{4} << 20;
  if (o.threads <= 0) o.threads = DefaultThreads();
}

ZstdSeekableWriter::~ZstdSeekableWriter() = default;

uint64_t ZstdSeekableWriter::frames() const { return impl_->entries.size(); }
uint64_t ZstdSeekableWriter::compressed_bytes() const { return impl_->compressed_bytes; }
uint64_t ZstdSeekableWriter::uncompressed_bytes() const { return impl_->uncompressed_bytes; }

Status ZstdSeekableWriter::Append(std::span<const std::byte> data) {
  Impl& w = *impl_;
  if (w.finished) return Status::FailedPrecondition("ZstdSeekableWriter: Append after Finish");
  KV_RETURN_IF_ERROR(w.status);
  while (!data.empty()) {
    if (!w.current_started) {
      w.current_started = true;
      if (!w.spare.empty()) {  // a buffer of an earlier frame: no allocation
        w.current = std::move(w.spare.back());
        w.spare.pop_back();
      }
      w.current.clear();
      w.current.reserve(w.options.frame_size + kMagicSize);
      if (w.options.codec == ZstdCodec::kBytePlane && w.frames_started == 0) {
        w.current.assign(std::begin(kBytePlaneMagic), std::end(kBytePlaneMagic));
      }
      ++w.frames_started;
    }
    const size_t room = w.options.frame_size - std::min(w.options.frame_size, w.current.size());
    const size_t take = std::min(room, data.size());
    w.current.insert(w.current.end(), data.begin(), data.begin() + take);
    data = data.subspan(take);
    w.uncompressed_bytes += take;
    if (w.current.size() >= w.options.frame_size) KV_RETURN_IF_ERROR(w.EndFrame());
  }
  return Status::OK();
}

Status ZstdSeekableWriter::EndFrame() { return impl_->EndFrame(); }

Status ZstdSeekableWriter::Impl::EndFrame() {
  KV_RETURN_IF_ERROR(status);
  if (!current_started) return Status::OK();
  // Byte planes apply to every frame but the first (magic and header).
  pending_split.push_back(options.codec == ZstdCodec::kBytePlane && frames_started > 1);
  pending.push_back(std::move(current));
  current.clear();
  current_started = false;
  if (pending.size() >= static_cast<size_t>(options.threads)) return FlushPending(false);
  return Status::OK();
}

std::vector<std::byte> ZstdSeekableWriter::RawFrame(std::span<const std::byte> content) const {
  return impl_->RawFrame(content);
}

std::vector<std::byte> ZstdSeekableWriter::Impl::RawFrame(std::span<const std::byte> content) const {
  std::vector<std::byte> frame_content;
  if (options.codec == ZstdCodec::kBytePlane) {
    frame_content.assign(std::begin(kBytePlaneMagic), std::end(kBytePlaneMagic));
  }
  frame_content.insert(frame_content.end(), content.begin(), content.end());
  // Magic; descriptor: 4-byte content size, single segment, no checksum, no
  // dictionary; the size; then raw blocks of at most 128 KiB.
  std::vector<std::byte> frame;
  StoreU32(frame, kZstdMagic);
  frame.push_back(std::byte{0xA0});
  StoreU32(frame, static_cast<uint32_t>(frame_content.size()));
  size_t at = 0;
  do {
    const size_t n = std::min(kMaxRawBlock, frame_content.size() - at);
    const uint32_t last = at + n == frame_content.size() ? 1 : 0;
    const uint32_t block_header = static_cast<uint32_t>(n << 3) | last;  // type 0: raw
    for (int i = 0; i < 3; ++i) frame.push_back(static_cast<std::byte>((block_header >> (8 * i)) & 0xFF));
    frame.insert(frame.end(), frame_content.begin() + static_cast<ptrdiff_t>(at),
                 frame_content.begin() + static_cast<ptrdiff_t>(at + n));
    at += n;
  } while (at < frame_content.size());
  return frame;
}

Status ZstdSeekableWriter::AppendRawFrame(std::span<const std::byte> content) {
  Impl& w = *impl_;
  KV_RETURN_IF_ERROR(w.status);
  if (w.frames_started != 0 || w.finished) {
    return Status::FailedPrecondition("ZstdSeekableWriter: a raw frame must come first");
  }
  if (content.size() > kMaxFrameInput) return Status::InvalidArgument("ZstdSeekableWriter: raw frame too large");
  const std::vector<std::byte> frame = w.RawFrame(content);
  const Status s = w.out->Append(frame);
  if (!s.ok()) return w.status = s;
  ++w.frames_started;
  const uint32_t stored = static_cast<uint32_t>(content.size() + (w.options.codec == ZstdCodec::kBytePlane ? kMagicSize : 0));
  w.entries.push_back({static_cast<uint32_t>(frame.size()), stored});
  w.compressed_bytes += frame.size();
  w.uncompressed_bytes += content.size();
  return Status::OK();
}

Status ZstdSeekableWriter::Impl::WriteBatch(Batch& batch) {
  for (size_t i = 0; i < batch.input.size(); ++i) {
    const std::span<const std::byte> frame(batch.output[i].data(), batch.output_size[i]);
    Status a = out->Append(frame);
    if (!a.ok()) return status = a;
    entries.push_back({static_cast<uint32_t>(frame.size()), static_cast<uint32_t>(batch.input[i].size())});
    compressed_bytes += frame.size();
  }
  return Status::OK();
}

Status ZstdSeekableWriter::Impl::FlushPending(bool all) {
  std::shared_ptr<Batch> next;
  if (!pending.empty()) {
    next = std::make_shared<Batch>();
    next->input = std::move(pending);
    next->split = std::move(pending_split);
    pending.clear();
    pending_split.clear();
    next->output.resize(next->input.size());
    next->output_size.resize(next->input.size());
    for (auto& o : next->output) {
      if (spare_output.empty()) break;
      o = std::move(spare_output.back());
      spare_output.pop_back();
    }
    const int threads = options.threads, level = options.level;
    if (threads == 1) {
      next->compressed = next->Compress(1, level);  // no overlap asked for
    } else {
      // On a worker, or on this thread when it waits if none has started it.
      next->compressing = TaskPool::Shared().Submit<Status>([batch = next.get(), threads, level] {
        return batch->Compress(threads, level);
      });
    }
  }
  // Write the previous batch while the next one compresses.
  if (in_flight) {
    Status s = in_flight->Wait();
    if (s.ok()) s = WriteBatch(*in_flight);
    for (auto& b : in_flight->input) spare.push_back(std::move(b));
    for (auto& b : in_flight->output) spare_output.push_back(std::move(b));
    in_flight.reset();
    if (!s.ok()) {
      if (next) (void)next->Wait();
      return status = s;
    }
  }
  in_flight = std::move(next);
  if (all && in_flight) return FlushPending(false);  // drain: nothing pending now
  return Status::OK();
}

Status ZstdSeekableWriter::Finish() {
  Impl& w = *impl_;
  if (w.finished) return Status::FailedPrecondition("ZstdSeekableWriter: Finish twice");
  KV_RETURN_IF_ERROR(w.EndFrame());
  KV_RETURN_IF_ERROR(w.FlushPending(true));
  w.finished = true;
  if (w.in_flight) return Status::Internal("zstd writer: a batch is still in flight");
  std::vector<std::byte> table;
  StoreU32(table, kSkippableMagic);
  StoreU32(table, static_cast<uint32_t>(w.entries.size() * kEntrySize + kFooterSize));
  for (const Impl::Entry& e : w.entries) {
    StoreU32(table, e.compressed);
    StoreU32(table, e.decompressed);
  }
  StoreU32(table, static_cast<uint32_t>(w.entries.size()));
  table.push_back(std::byte{0});  // descriptor: no per-frame checksums in the table
  StoreU32(table, kSeekableMagic);
  w.compressed_bytes += table.size();
  return w.status = w.out->Append(table);
}

// ---- Reader ----

Result<ZstdSeekableReader> ZstdSeekableReader::Open(std::span<const std::byte> file,
                                                    const ZstdReadLimits& limits) {
  auto corrupt = [](const std::string& m) { return Status::Corruption("zstd seek table: " + m); };
  if (file.size() < 8 + kFooterSize) return corrupt("file too short for a seek table");
  const std::byte* footer = file.data() + file.size() - kFooterSize;
  if (LoadU32(footer + 5) != kSeekableMagic) return corrupt("no seekable-format footer");
  const uint64_t n = LoadU32(footer);
  const uint8_t descriptor = static_cast<uint8_t>(footer[4]);
  if ((descriptor & 0x7F) != 0) return corrupt("reserved descriptor bits set");
  const uint64_t entry_size = (descriptor & 0x80) ? 12 : 8;
  if (n > limits.max_frames) {
    return Status::ResourceExhausted("zstd seek table: " + std::to_string(n) + " frames exceed the limit");
  }
  const uint64_t table_size = 8 + n * entry_size + kFooterSize;
  if (table_size > file.size()) return corrupt("seek table larger than the file");
  const std::byte* table = file.data() + file.size() - table_size;
  if (LoadU32(table) != kSkippableMagic ||
      LoadU32(table + 4) != n * entry_size + kFooterSize) {
    return corrupt("skippable frame header does not match the footer");
  }
  ZstdSeekableReader r;
  r.file_ = file;
  uint64_t coff = 0, doff = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const std::byte* e = table + 8 + i * entry_size;
    Frame f{coff, LoadU32(e), doff, LoadU32(e + 4)};
    if (f.decompressed_size > limits.max_frame_size) {
      return Status::ResourceExhausted("zstd seek table: frame " + std::to_string(i) +
                                       " declares " + std::to_string(f.decompressed_size) + " bytes");
    }
    coff += f.compressed_size;
    doff += f.decompressed_size;
    if (coff > file.size() - table_size) return corrupt("frame " + std::to_string(i) + " runs into the seek table");
    if (doff > limits.max_decompressed_size) {
      return Status::ResourceExhausted("zstd seek table: total decompressed size exceeds the limit");
    }
    r.frames_.push_back(f);
  }
  if (coff != file.size() - table_size) {
    return corrupt(std::to_string(file.size() - table_size - coff) + " bytes not covered by any frame");
  }
  r.decompressed_size_ = doff;
  KV_RETURN_IF_ERROR(r.DetectCodec());
  return r;
}

// The byte-plane magic is the first content of frame 0; only a prefix of the
// frame is decompressed to look for it.
Status ZstdSeekableReader::DetectCodec() {
  if (frames_.empty() || frames_[0].decompressed_size < kMagicSize) return Status::OK();
  const Frame& f = frames_[0];
  std::byte prefix[kMagicSize];
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) return Status::ResourceExhausted("zstd: cannot create a context");
  ZSTD_inBuffer in{file_.data() + f.compressed_offset, f.compressed_size, 0};
  ZSTD_outBuffer out{prefix, kMagicSize, 0};
  size_t rc = 0;
  while (out.pos < out.size && in.pos < in.size) {
    rc = ZSTD_decompressStream(dctx, &out, &in);
    if (ZSTD_isError(rc) || rc == 0) break;
  }
  ZSTD_freeDCtx(dctx);
  if (ZSTD_isError(rc)) return ZstdError("frame 0", rc);
  if (out.pos == kMagicSize && std::memcmp(prefix, kBytePlaneMagic, kMagicSize) == 0) {
    codec_ = ZstdCodec::kBytePlane;
    // Offsets of the original exclude the magic.
    frames_[0].decompressed_size -= kMagicSize;
    for (size_t i = 1; i < frames_.size(); ++i) frames_[i].decompressed_offset -= kMagicSize;
    decompressed_size_ -= kMagicSize;
  }
  return Status::OK();
}

namespace {

// A buffer of `n` bytes: `reused` (the caller's thread_local, kept for the
// thread's next frame: no allocation per frame) for the usual sizes, `own`
// (released after the call) for a larger, possibly hostile, frame.
std::vector<std::byte>& FrameScratch(std::vector<std::byte>& reused, std::vector<std::byte>& own, size_t n) {
  constexpr size_t kMaxReused = size_t{16} << 20;
  std::vector<std::byte>& buffer = n <= kMaxReused ? reused : own;
  buffer.resize(n);
  return buffer;
}

}  // namespace

Result<ZstdSeekableReader> ZstdSeekableReader::Open(const ReadableFile& file, const ZstdReadLimits& limits) {
  KV_ASSIGN_OR_RETURN(ZstdSeekableReader r, Open(file.data(), limits));
  r.source_ = &file;
  return r;
}

Status ZstdSeekableReader::DecompressContent(size_t index, std::span<std::byte> content) const {
  const Frame& f = frames_[index];
  const std::byte* src = file_.data() + f.compressed_offset;
  thread_local std::vector<std::byte> reused;
  std::vector<std::byte> own;
  if (source_ != nullptr) {
    std::vector<std::byte>& compressed = FrameScratch(reused, own, f.compressed_size);
    KV_RETURN_IF_ERROR(source_->ReadAt(f.compressed_offset, compressed));
    src = compressed.data();
  }
  const unsigned long long declared = ZSTD_getFrameContentSize(src, f.compressed_size);
  if (declared != content.size()) {
    return Status::Corruption("zstd frame " + std::to_string(index) +
                              ": content size disagrees with the seek table");
  }
  if (ZSTD_findFrameCompressedSize(src, f.compressed_size) != f.compressed_size) {
    return Status::Corruption("zstd frame " + std::to_string(index) + ": size disagrees with the seek table");
  }
  struct DCtxHolder {
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    ~DCtxHolder() { ZSTD_freeDCtx(dctx); }
  };
  thread_local DCtxHolder holder;  // reused, like the compression contexts
  if (holder.dctx == nullptr) return Status::ResourceExhausted("zstd: cannot create a context");
  const size_t n = ZSTD_decompressDCtx(holder.dctx, content.data(), content.size(), src, f.compressed_size);
  if (ZSTD_isError(n)) return ZstdError("frame " + std::to_string(index), n);
  if (n != content.size()) {
    return Status::Corruption("zstd frame " + std::to_string(index) + ": short frame");
  }
  return Status::OK();
}

Status ZstdSeekableReader::ReadFrame(size_t index, std::span<std::byte> out) const {
  const Frame& f = frames_[index];
  if (out.size() != f.decompressed_size) return Status::InvalidArgument("zstd ReadFrame: wrong output size");
  if (codec_ == ZstdCodec::kZstd) return DecompressContent(index, out);
  const size_t extra = index == 0 ? kMagicSize : 0;
  thread_local std::vector<std::byte> reused;
  std::vector<std::byte> own;
  std::vector<std::byte>& content = FrameScratch(reused, own, out.size() + extra);
  KV_RETURN_IF_ERROR(DecompressContent(index, content));
  if (index == 0) {
    if (std::memcmp(content.data(), kBytePlaneMagic, kMagicSize) != 0) {
      return Status::Corruption("zstd frame 0: byte-plane magic changed");
    }
    std::memcpy(out.data(), content.data() + kMagicSize, out.size());
  } else {
    MergeBytePlanes(content, out);
  }
  return Status::OK();
}

Status ZstdSeekableReader::Read(uint64_t offset, std::span<std::byte> out, int threads) const {
  if (offset > decompressed_size_ || out.size() > decompressed_size_ - offset) {
    return Status::InvalidArgument("zstd Read: range past the end of the content");
  }
  const uint64_t begin = offset, end = offset + out.size();
  // Frames overlapping [begin, end): first..last.
  size_t first = 0;
  while (first < frames_.size() &&
         frames_[first].decompressed_offset + frames_[first].decompressed_size <= begin) {
    ++first;
  }
  size_t last = first;
  while (last < frames_.size() && frames_[last].decompressed_offset < end) ++last;
  return ParallelFor(last - first, threads, [&](size_t k) -> Status {
    const size_t i = first + k;
    const Frame& f = frames_[i];
    const uint64_t from = std::max(begin, f.decompressed_offset);
    const uint64_t to = std::min(end, f.decompressed_offset + f.decompressed_size);
    if (from >= to) return Status::OK();  // an empty frame
    std::byte* dst = out.data() + (from - begin);
    if (from == f.decompressed_offset && to - from == f.decompressed_size) {
      return ReadFrame(i, {dst, f.decompressed_size});
    }
    std::vector<std::byte> scratch(f.decompressed_size);
    KV_RETURN_IF_ERROR(ReadFrame(i, scratch));
    std::memcpy(dst, scratch.data() + (from - f.decompressed_offset), to - from);
    return Status::OK();
  });
}

Status ZstdSeekableReader::ReadAll(std::span<std::byte> out, int threads) const {
  if (out.size() != decompressed_size_) {
    return Status::InvalidArgument("zstd ReadAll: output size differs from the content size");
  }
  return ParallelFor(frames_.size(), threads, [&](size_t i) {
    const Frame& f = frames_[i];
    return ReadFrame(i, out.subspan(f.decompressed_offset, f.decompressed_size));
  });
}

}  // namespace kvstore
