// The public prompt-cache file functions (docs/format.md §5): thin
// compositions of PromptCacheReader and the writer.
#include "kvstore/prompt_cache_file.h"

#include "libkvstore/format/reader_impl.h"
#include "libkvstore/format/writer.h"

namespace kvstore {
namespace {

// The first 16 hex digits: enough to tell two digests apart, short enough
// for one line.
std::string ShortDigest(const Digest& d) { return d.ToHex().substr(0, 16) + "..."; }

// Mismatches listed in one Corruption message; the rest are counted.
constexpr size_t kMismatchesListed = 8;

}  // namespace

std::string DigestMismatch::Message(std::string_view path) const {
  const DigestAlgorithm algorithm =
      expected ? expected->algorithm() : found ? found->algorithm() : DigestAlgorithm::kSha256;
  return std::string(path) + ": " + (tensor.empty() ? "the header" : "tensor '" + tensor + "'") + ": " +
         std::string(DigestAlgorithmTitle(algorithm)) +
         " mismatch: expected " + (expected ? ShortDigest(*expected) : "(no valid digest stored)") +
         ", found " + (found ? ShortDigest(*found) : "(no such tensor)");
}

Status VerifyReport::ToStatus(std::string_view path) const {
  if (!has_digests) return Status::FailedPrecondition(std::string(path) + ": the file carries no digests to verify");
  if (mismatches.empty()) return Status::OK();
  std::string msg;
  for (size_t i = 0; i < mismatches.size() && i < kMismatchesListed; ++i) {
    msg += (i > 0 ? "\n" : "") + mismatches[i].Message(path);
  }
  if (mismatches.size() > kMismatchesListed) {
    msg += "\n" + std::string(path) + ": " + std::to_string(mismatches.size() - kMismatchesListed) +
           " more digest mismatches";
  }
  return Status::Corruption(msg);
}

Status SavePromptCache(Env* env, const std::string& path, const PromptCache& cache,
                       const Metadata& user_metadata, const SavePromptCacheOptions& options) {
  return SaveLayers(
      env, path, cache.size(), [&](size_t i) -> Result<std::shared_ptr<const Cache>> { return cache[i]; },
      user_metadata, options);
}

Status SavePromptCache(Env* env, const std::string& path, size_t num_layers, const LayerSource& source,
                       const Metadata& user_metadata, const SavePromptCacheOptions& options) {
  return SaveLayers(env, path, num_layers, source, user_metadata, options);
}

Result<LoadedPromptCache> LoadPromptCache(Env* env, const std::string& path, const LoadPromptCacheOptions& options) {
  PromptCacheReader::Options open;
  open.limits = options.limits;
  open.threads = options.threads;
  open.decompress_at_open = true;  // one parallel pass over every frame
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(env, path, open));
  const PromptCacheInfo& info = reader->info();
  LoadedPromptCache out;
  out.layout = info.layout;
  out.compressed = info.compression.has_value();
  out.has_digests = info.has_digests;
  out.digest_algorithm = info.digest_algorithm;
  out.user_metadata = info.user_metadata;
  // In kvtool verify's order: impossible layers (Corruption), the digests,
  // then what kvstore cannot load; all before any layer is built.
  const Status valid = reader->Validate();
  if (valid.IsCorruption()) return valid;
  // A compressed file is decompressed whole at open: checking its digests
  // then costs one more pass over bytes in memory.
  if (options.verify || (out.compressed && info.has_digests && options.verify_compressed)) {
    KV_ASSIGN_OR_RETURN(VerifyReport report, reader->Verify(options.threads));
    KV_RETURN_IF_ERROR(report.ToStatus(path));
    out.verified = true;
  }
  if (!info.unsupported.empty()) return Status::NotSupported(path + ": " + info.unsupported);
  KV_RETURN_IF_ERROR(valid);
  for (size_t i = 0; i < reader->num_layers(); ++i) {
    KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> layer, reader->ReadLayer(i));
    out.cache.push_back(std::move(layer));
  }
  return out;
}

Result<PromptCacheInfo> ReadPromptCacheInfo(Env* env, const std::string& path, const ParseLimits& limits) {
  PromptCacheReader::Options open;
  open.limits = limits;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(env, path, open));
  return reader->info();
}

Status ValidatePromptCacheFile(Env* env, const std::string& path, const ParseLimits& limits) {
  PromptCacheReader::Options open;
  open.limits = limits;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(env, path, open));
  return reader->Validate();
}

SavePromptCacheOptions SameFormatAs(const PromptCacheInfo& info) {
  SavePromptCacheOptions options;
  options.layout = info.layout == PromptCacheLayout::kMlxLmLegacy ? PromptCacheLayout::kMlxLm : info.layout;
  if (info.has_digests) options.digest = info.digest_algorithm;
  if (info.compression) {
    const bool planes = info.compression->codec == ZstdCodecName(ZstdCodec::kBytePlane);
    options.codec = planes ? ZstdCodec::kBytePlane : ZstdCodec::kZstd;
    options.compression_level = planes ? 1 : 3;
  }
  return options;
}

Result<VerifyReport> VerifyPromptCacheFile(Env* env, const std::string& path, int threads,
                                           const ProgressFn& progress) {
  PromptCacheReader::Options open;
  open.threads = threads;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(env, path, open));
  return reader->Verify(threads, progress);
}

}  // namespace kvstore
