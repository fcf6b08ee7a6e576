// Strict safetensors reading and streaming safetensors writing.
//
// File layout (docs/format.md section 2):
//   [u64 little-endian N][N bytes of UTF-8 JSON header][data section]
// The header maps tensor name -> {"dtype", "shape", "data_offsets"} plus an
// optional "__metadata__" object of string -> string (or null, which MLX
// writes when there is no metadata).
//
// Parsing is a pure function over bytes (ParseSafetensors*), so it can be
// fuzzed directly. Every rule in docs/format.md §3 fails with its own message;
// the codes are Corruption for malformed bytes and NotSupported for a dtype
// this build knows but cannot hold (none today), and ResourceExhausted when
// the header is larger than the limit.
//
// Thread safety: the parse functions are pure; a SafetensorsFile is immutable
// after Open and may be shared between threads.
#ifndef KVSTORE_SAFETENSORS_H_
#define KVSTORE_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/dtype.h"
#include "kvstore/env.h"
#include "kvstore/status.h"

namespace kvstore {

// The header never exceeds this many bytes (MLX's and Hugging Face's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderSize = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  // Byte range [begin, end) relative to the start of the data section.
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

using Metadata = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsHeader {
  enum class MetadataForm { kAbsent, kNull, kObject };

  uint64_t header_size = 0;          // N: the JSON bytes including padding
  std::vector<TensorInfo> tensors;   // in header order
  Metadata metadata;                 // in header order
  MetadataForm metadata_form = MetadataForm::kAbsent;
  uint64_t data_size = 0;            // bytes of the data section

  // File offset of the data section: 8 + N.
  uint64_t data_offset() const { return 8 + header_size; }
  // nullptr when absent.
  const TensorInfo* FindTensor(std::string_view name) const;
  // nullopt when absent.
  std::optional<std::string_view> FindMetadata(std::string_view key) const;
};

struct ParseLimits {
  uint64_t max_header_size = kMaxSafetensorsHeaderSize;
  size_t max_rank = 32;
};

// Reads N from the first 8 bytes and checks it against `file_size`
// (rules H1-H3 of docs/format.md). `prefix` needs only 8 bytes.
Result<uint64_t> ParseSafetensorsHeaderSize(std::span<const std::byte> prefix,
                                            uint64_t file_size,
                                            const ParseLimits& limits = {});

// Parses and validates the header of a file of `file_size` bytes. `prefix`
// holds the file's first bytes and must cover at least 8 + N of them (it may
// be the whole file). Validates every rule of docs/format.md §3, including
// that the tensors tile the data section exactly (no overlap, no gap, no
// trailing bytes). Reads no tensor byte.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> prefix,
                                                 uint64_t file_size,
                                                 const ParseLimits& limits = {});

// ParseSafetensorsHeader over a whole file in memory.
inline Result<SafetensorsHeader> ParseSafetensors(std::span<const std::byte> file,
                                                  const ParseLimits& limits = {}) {
  return ParseSafetensorsHeader(file, file.size(), limits);
}

// An opened safetensors file: its mapping and parsed header.
class SafetensorsFile {
 public:
  // Maps `path` through `env` and parses the header; touches no tensor byte.
  static Result<std::shared_ptr<const SafetensorsFile>> Open(Env* env, const std::string& path,
                                                             const ParseLimits& limits = {});
  // Parses bytes already in memory (kept alive by `file`).
  static Result<std::shared_ptr<const SafetensorsFile>> FromReadable(
      std::shared_ptr<const ReadableFile> file, const ParseLimits& limits = {});

  const SafetensorsHeader& header() const { return header_; }
  const ReadableFile& file() const { return *file_; }

  // The raw bytes of a tensor (in the mapping).
  std::span<const std::byte> TensorBytes(const TensorInfo& info) const;
  // The tensor as an Array: a zero-copy view of the mapping when its bytes
  // are aligned to the element size, else an aligned copy. The view keeps the
  // mapping alive. NotFound when there is no such tensor.
  Result<Array> Tensor(std::string_view name) const;
  Result<Array> Tensor(const TensorInfo& info) const;

 private:
  SafetensorsFile(std::shared_ptr<const ReadableFile> file, SafetensorsHeader header);

  std::shared_ptr<const ReadableFile> file_;
  std::shared_ptr<Storage> storage_;
  SafetensorsHeader header_;
};

// ---- Writing ----

struct NamedArray {
  std::string name;
  Array array;
};

struct SafetensorsWriteOptions {
  // The data section starts at a multiple of this (the header JSON is padded
  // with spaces). A power of two >= 1; 1 means no padding (MLX's own layout).
  size_t alignment = 8;
  // Order of tensor data: by element size descending then name (so every
  // tensor is aligned to its element size when alignment >= 8), or by name.
  enum class DataOrder { kAlignedBySize, kByName };
  DataOrder data_order = DataOrder::kAlignedBySize;
  // With no metadata: write "__metadata__": null (as MLX does) or omit it.
  bool null_metadata_when_empty = true;
};

// The planned bytes of a safetensors file before any tensor data is written:
// the header (length prefix, JSON, padding) and each tensor's range.
struct SafetensorsLayout {
  std::string header_bytes;         // 8-byte length + JSON + padding
  std::vector<TensorInfo> tensors;  // in data order
  uint64_t data_size = 0;
  uint64_t file_size() const { return header_bytes.size() + data_size; }
};

// Plans a file holding `tensors` (only names, dtypes and shapes are used) and
// `metadata`. Keys in the JSON are sorted bytewise (as MLX writes them).
// Errors: InvalidArgument for duplicate or empty names, "__metadata__" as a
// tensor name, invalid UTF-8 in names or metadata, or a bad alignment.
Result<SafetensorsLayout> PlanSafetensors(std::span<const NamedArray> tensors,
                                          const Metadata& metadata,
                                          const SafetensorsWriteOptions& options = {});
// The same from names, dtypes and shapes alone (begin/end are ignored), for
// writers that produce the data later.
Result<SafetensorsLayout> PlanSafetensors(std::span<const TensorInfo> tensors,
                                          const Metadata& metadata,
                                          const SafetensorsWriteOptions& options = {});

// Appends an array's elements in row-major order (its bytes in a safetensors
// data section), run by run: a strided view needs no dense copy.
Status AppendArrayBytes(WritableFile& out, const Array& array);

// Streams a whole file to `out`: the header, then each tensor's elements in
// the layout's data order (strided views are written without a full copy).
// Same inputs give the same bytes.
Status WriteSafetensors(WritableFile& out, std::span<const NamedArray> tensors,
                        const Metadata& metadata, const SafetensorsWriteOptions& options = {});

}  // namespace kvstore

#endif  // KVSTORE_SAFETENSORS_H_
