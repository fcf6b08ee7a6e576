// The prompt-cache writer behind SavePromptCache and ConvertPromptCacheFile
// (docs/format.md §5.4-5.5).
//
// Two passes over the layers: the first flattens each layer to plan the
// header (names, dtypes, shapes, metadata), the second writes the tensor data
// in the file's data order, fetching each layer again from the source. The
// tensors are hashed while they are written (on worker threads) and the
// header, whose length does not depend on the digest values, is written last
// into the space reserved for it: in a plain file its first bytes, in a
// compressed one a first frame of raw zstd blocks, whose size depends only on
// the header's length.
#ifndef KVSTORE_LIBKVSTORE_FORMAT_WRITER_H_
#define KVSTORE_LIBKVSTORE_FORMAT_WRITER_H_

#include <functional>
#include <optional>
#include <string>

#include "kvstore/prompt_cache_file.h"
#include "kvstore/digest.h"

namespace kvstore {

// The digest a tensor's bytes must have because they are copied unchanged
// from tensor `tensor` of the file `path`, which stores it.
struct ExpectedDigest {
  std::optional<Digest> digest;  // nullopt: the file stores none for it (always a mismatch)
  std::string path;
  std::string tensor;
};

struct WriterHooks {
  // Consulted for every tensor written; a mismatch fails the save with
  // Corruption, the source tensor's DigestMismatch message (the output file
  // is left untouched).
  std::function<std::optional<ExpectedDigest>(const Array&)> expected_digest;
  // The algorithm of the digests expected_digest returns (the source
  // file's); hashed apart when it is not the output's.
  DigestAlgorithm expected_algorithm = DigestAlgorithm::kSha256;
  // With integrity on: the file also carries 1.kvstore_hmac_sha256, set to
  // what this returns (64 hex digits) for the file's header digest and its
  // tensor digests as stored, whatever their algorithm (docs/format.md §5.4).
  std::function<std::string(std::string_view header_digest_hex, std::string_view tensor_digests_json)> seal;
};

Status SaveLayers(Env* env, const std::string& path, size_t num_layers, const LayerSource& source,
                  const Metadata& user_metadata, const SavePromptCacheOptions& options,
                  const WriterHooks& hooks = {});
// The same bytes appended to `file` (from its start), for in-memory saves:
// no temp file, no rename, no sync.
Status SaveLayersTo(WritableFile& file, size_t num_layers, const LayerSource& source, const Metadata& user_metadata,
                    const SavePromptCacheOptions& options, const WriterHooks& hooks = {});

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_WRITER_H_
