// PromptCacheReader's state, shared with the conversion code (convert.cc),
// which checks the bytes it copies against the input's stored digests. Not
// part of the public API: the public header only names the friend below.
#ifndef KVSTORE_LIBKVSTORE_FORMAT_READER_IMPL_H_
#define KVSTORE_LIBKVSTORE_FORMAT_READER_IMPL_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvstore/prompt_cache_file.h"
#include "kvstore/zstd_seekable.h"
#include "libkvstore/format/layout.h"
#include "kvstore/digest.h"

namespace kvstore {

struct PromptCacheReader::Impl {
  std::string path;
  int threads = 0;
  bool prefetch = false;  // populate a plain file's pages before handing out views
  std::shared_ptr<const ReadableFile> file;       // the bytes as stored
  std::shared_ptr<const SafetensorsFile> plain;   // plain, or decompressed at open
  std::optional<ZstdSeekableReader> zstd;         // compressed, read frame by frame
  SafetensorsHeader header;
  std::vector<size_t> by_begin;  // header.tensors indices sorted by data offset
  ParsedFile parsed;
  PromptCacheInfo info;

  // Stored digests (when the file has them).
  DigestAlgorithm algorithm = DigestAlgorithm::kSha256;  // the file's (SHA-256 when it names none)
  std::map<std::string, Digest> digests;
  bool header_digest_ok = false;   // the header digest is present and matches
  bool digests_readable = false;   // both digest entries present and well formed
  std::optional<Digest> header_digest_stored;  // when readable
  Digest header_digest_found;                  // of the header as it is (with digests)

  // The header's tensors `indices`, by index. Plain files: views of the mapping (populated first when
  // `prefetch`); compressed files: decompressed on all cores.
  Result<TensorArrays> Fetch(const std::vector<size_t>& indices) const;

  // The tensors of `indices` whose bytes differ from their stored digest
  // (or that have none), in the order of `indices`, hashed on up to
  // `workers` threads. A plain file is hashed in its mapping (pages
  // populated first); a compressed file's tensors must be in `arrays` (as
  // Fetch returns them).
  std::vector<DigestMismatch> Mismatches(const std::vector<size_t>& indices, const TensorArrays& arrays,
                                         int workers) const;

  // Mismatches on this layer's threads; Corruption with the first's Message.
  Status CheckTensors(const std::vector<size_t>& indices, const TensorArrays& arrays) const;

  // The header's failed check. REQUIRES: !digests_readable || !header_digest_ok.
  DigestMismatch HeaderMismatch() const;

  // For a plain file: the index of the tensor whose bytes `a` views exactly
  // (same storage, offset, dtype and shape, contiguous); nullopt otherwise.
  std::optional<size_t> ViewedTensor(const Array& a) const;

  // FailedPrecondition without digests, Corruption (HeaderMismatch's
  // Message) when the header digest does not match.
  Status CheckHeaderDigest() const;

  // How a load names layer `index`: "<path>: layer i (<class>)".
  std::string LayerWhere(size_t index) const;
  // What header-only validation found for layer `index` (OK when nothing),
  // as ReadLayer returns it (layer_check.cc).
  Status LayerProblem(size_t index) const;
};

// The library's access to a reader's state.
struct PromptCacheReaderInternals {
  using Impl = PromptCacheReader::Impl;
  static const Impl& Of(const PromptCacheReader& reader) { return *reader.impl_; }
};
using ReaderImpl = PromptCacheReaderInternals::Impl;

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_READER_IMPL_H_
