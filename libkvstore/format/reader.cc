// PromptCacheReader: opens a plain or compressed prompt-cache file, parses
// its header and layout, and builds layers on demand (docs/format.md §5-6).
#include <algorithm>
#include <functional>
#include <unordered_set>

#include "kvstore/file_kind.h"
#include "kvstore/json.h"
#include "libkvstore/format/digests.h"
#include "libkvstore/format/reader_impl.h"
#include "libkvstore/integrity/digest.h"
#include "libkvstore/io/memory_file.h"
#include "libkvstore/util/parallel.h"

namespace kvstore {

std::string_view LayoutName(PromptCacheLayout layout) {
  switch (layout) {
    case PromptCacheLayout::kMlxLm: return "mlx-lm";
    case PromptCacheLayout::kMlxSwiftLm: return "mlx-swift-lm";
    case PromptCacheLayout::kMlxLmLegacy: return "mlx-lm-legacy";
    case PromptCacheLayout::kMlxLm031: return "mlx-lm-0.31";
    case PromptCacheLayout::kMlxLm032: return "mlx-lm-0.32";
  }
  return "unknown";
}

std::optional<PromptCacheLayout> LayoutFromName(std::string_view name) {
  for (PromptCacheLayout l : {PromptCacheLayout::kMlxLm, PromptCacheLayout::kMlxSwiftLm, PromptCacheLayout::kMlxLmLegacy,
                              PromptCacheLayout::kMlxLm031, PromptCacheLayout::kMlxLm032}) {
    if (LayoutName(l) == name) return l;
  }
  return std::nullopt;
}

bool IsKvstoreMetadataKey(std::string_view user_key) {
  return user_key == kFormatKey || user_key == kTensorDigestsKey || user_key == kHeaderDigestKey ||
         user_key == kHmacKey || user_key == kDigestAlgorithmKey || user_key == kDigestTensorsKey ||
         user_key == kDigestHeaderKey;
}

namespace {

// A file that failed as safetensors (or as a seekable container): named
// when it looks like a file of another kind, else the error as it is.
Status NotAPromptCache(const std::string& path, std::span<const std::byte> bytes, const Status& error) {
  const FileKind kind = RecognizeFileKind(bytes);
  // A damaged container of ours is reported as such, not as another format.
  if (kind == FileKind::kUnknown || kind == FileKind::kSeekableZstd) return error.WithPrefix(path);
  return Status::Corruption(NotSafetensorsMessage(path, kind));
}

// The most a zstd frame can expand: an RLE block stores up to 128 KiB
// (the largest block) in 4 bytes. Declared sizes beyond it cannot be valid
// and are refused before anything is allocated; a file of zeros (a cache
// before its first write, padding) legitimately comes close to it.
constexpr uint64_t kZstdMaxExpansion = (uint64_t{128} << 10) / 4;

ZstdReadLimits LimitsFor(uint64_t compressed_size) {
  ZstdReadLimits limits;
  limits.max_decompressed_size =
      std::min<uint64_t>(limits.max_decompressed_size, compressed_size * kZstdMaxExpansion + (uint64_t{1} << 20));
  return limits;
}

Result<SafetensorsHeader> ReadCompressedHeader(const ZstdSeekableReader& z, const ParseLimits& limits) {
  std::vector<std::byte> prefix(std::min<uint64_t>(8, z.decompressed_size()));
  KV_RETURN_IF_ERROR(z.Read(0, prefix));
  KV_ASSIGN_OR_RETURN(uint64_t n, ParseSafetensorsHeaderSize(prefix, z.decompressed_size(), limits));
  prefix.resize(8 + n);
  KV_RETURN_IF_ERROR(z.Read(0, prefix));
  return ParseSafetensorsHeader(prefix, z.decompressed_size(), limits);
}

LayerInfo DescribeLayer(const ParsedLayer& layer, size_t index, const SafetensorsHeader& h) {
  LayerInfo info;
  info.index = index;
  info.class_name = layer.stored_class;
  info.meta_state = layer.stored_meta;
  info.offset = layer.full_state ? layer.built_offset : OffsetAfterLoad(layer, h);
  for (size_t t : layer.tensors) {
    const TensorInfo& ti = h.tensors[t];
    info.tensors.push_back(LayerTensor{ti.name, ti.dtype, ti.shape, ti.nbytes()});
  }
  for (size_t c = 0; c < layer.children.size(); ++c) info.children.push_back(DescribeLayer(layer.children[c], c, h));
  if (!layer.unsupported.ok()) info.unsupported = std::string(layer.unsupported.message());
  if (layer.problem.IsNotSupported()) {
    info.unsupported = std::string(layer.problem.message());
  } else if (!layer.problem.ok()) {
    info.errors.emplace_back(layer.problem.message());
  }
  return info;
}

// Corruption for an unknown algorithm; a digest of the wrong length leaves
// the digests unreadable (a header mismatch).
Status ReadDigests(ReaderImpl& r) {
  DigestKeys keys;
  Result<DigestAlgorithm> algorithm = DeclaredDigestAlgorithm(r.header.metadata, &keys);
  if (!algorithm.ok()) return algorithm.status().WithPrefix(r.path);
  r.algorithm = *algorithm;
  auto tensors_json = r.header.FindMetadata(keys.tensors);
  auto header_hex = r.header.FindMetadata(keys.header);
  if (!tensors_json && !header_hex) return Status::OK();  // no digests
  r.header_digest_found =
      ComputeDigest(r.algorithm, std::string_view(CanonicalHeader(r.header.tensors, r.header.metadata)));
  if (!tensors_json || !header_hex) return Status::OK();
  Result<std::map<std::string, Digest>> parsed = DigestsFromJson(*tensors_json, r.algorithm);
  std::optional<Digest> want = Digest::FromHex(r.algorithm, *header_hex);
  if (!parsed.ok() || !want) return Status::OK();  // unreadable: a header mismatch when verified
  r.digests = std::move(parsed).value();
  r.digests_readable = true;
  r.header_digest_stored = want;
  r.header_digest_ok = r.header_digest_found == *want;
  return Status::OK();
}

}  // namespace

Status PromptCacheReader::Impl::CheckHeaderDigest() const {
  if (!parsed.has_digests) return Status::FailedPrecondition(path + ": the file carries no digests to verify");
  if (!digests_readable || !header_digest_ok) return Status::Corruption(HeaderMismatch().Message(path));
  return Status::OK();
}

DigestMismatch PromptCacheReader::Impl::HeaderMismatch() const {
  return DigestMismatch{.tensor = "", .expected = header_digest_stored, .found = header_digest_found};
}

Result<TensorArrays> PromptCacheReader::Impl::Fetch(const std::vector<size_t>& indices) const {
  TensorArrays arrays;
  if (plain) {
    for (size_t i : indices) {
      if (prefetch) plain->file().WillRead(header.data_offset() + header.tensors[i].begin, header.tensors[i].nbytes());
      KV_ASSIGN_OR_RETURN(arrays[i], plain->Tensor(header.tensors[i]));
    }
    return arrays;
  }
  // Runs of tensors adjacent in the data section are decompressed together.
  std::vector<size_t> order = indices;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return header.tensors[a].begin < header.tensors[b].begin; });
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (size_t k = 0; k < order.size();) {
    size_t end = k + 1;
    while (end < order.size() && header.tensors[order[end]].begin == header.tensors[order[end - 1]].end) ++end;
    const uint64_t begin = header.tensors[order[k]].begin;
    const uint64_t bytes = header.tensors[order[end - 1]].end - begin;
    std::shared_ptr<Storage> storage = Storage::AllocateUninitialized(bytes);
    KV_RETURN_IF_ERROR(zstd->Read(header.data_offset() + begin, {storage->mutable_data(), bytes}, threads)
                           .WithPrefix(path));
    for (size_t j = k; j < end; ++j) {
      const TensorInfo& t = header.tensors[order[j]];
      const uint64_t at = t.begin - begin;
      arrays[order[j]] = at % DTypeSize(t.dtype) == 0
                             ? Array::FromStorage(t.dtype, t.shape, storage, at)
                             : Array::FromBytes(t.dtype, t.shape, {storage->data() + at, t.nbytes()});
    }
    k = end;
  }
  return arrays;
}

std::vector<DigestMismatch> PromptCacheReader::Impl::Mismatches(const std::vector<size_t>& indices,
                                                                const TensorArrays& arrays, int workers) const {
  std::vector<Digest> found(indices.size());
  std::vector<char> bad(indices.size(), 0);
  (void)ParallelFor(indices.size(), workers, [&](size_t k) {
    const TensorInfo& t = header.tensors[indices[k]];
    Digest got;
    if (plain) {
      plain->file().WillRead(header.data_offset() + t.begin, t.nbytes());
      got = ComputeDigest(algorithm, plain->TensorBytes(t));
    } else {
      got = ComputeDigest(algorithm, arrays.at(indices[k]));
    }
    auto it = digests.find(t.name);
    bad[k] = it == digests.end() || it->second != got;
    found[k] = got;
    return Status::OK();
  });
  std::vector<DigestMismatch> out;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (!bad[k]) continue;
    const std::string& name = header.tensors[indices[k]].name;
    auto it = digests.find(name);
    out.push_back(DigestMismatch{.tensor = name,
                                 .expected = it == digests.end() ? std::nullopt : std::optional(it->second),
                                 .found = found[k]});
  }
  return out;
}

Status PromptCacheReader::Impl::CheckTensors(const std::vector<size_t>& indices,
                                             const TensorArrays& arrays) const {
  uint64_t bytes = 0;
  for (size_t i : indices) bytes += header.tensors[i].nbytes();
  // Small layers are hashed on this thread: starting workers would cost more.
  const std::vector<DigestMismatch> bad = Mismatches(indices, arrays, bytes < (uint64_t{1} << 20) ? 1 : threads);
  if (bad.empty()) return Status::OK();
  return Status::Corruption(bad[0].Message(path));
}

std::optional<size_t> PromptCacheReader::Impl::ViewedTensor(const Array& a) const {
  if (!plain || !a.defined() || !a.is_contiguous()) return std::nullopt;
  const std::byte* base = plain->file().data().data();
  const std::byte* p = a.data();
  if (p < base + header.data_offset() || p >= base + plain->file().size()) return std::nullopt;
  const uint64_t begin = static_cast<uint64_t>(p - base) - header.data_offset();
  auto it = std::lower_bound(by_begin.begin(), by_begin.end(), begin,
                             [&](size_t t, uint64_t b) { return header.tensors[t].begin < b; });
  // Zero-size tensors share offsets: look at every tensor starting here.
  for (; it != by_begin.end() && header.tensors[*it].begin == begin; ++it) {
    const TensorInfo& t = header.tensors[*it];
    if (t.dtype == a.dtype() && t.shape == a.shape()) return *it;
  }
  return std::nullopt;
}

std::optional<int64_t> PromptCacheInfo::tokens() const {
  std::optional<int64_t> best;
  std::function<void(const LayerInfo&)> scan = [&](const LayerInfo& l) {
    if (l.offset && (!best || *l.offset > *best)) best = l.offset;
    for (const LayerInfo& c : l.children) scan(c);
  };
  for (const LayerInfo& l : layers) scan(l);
  return best;
}

bool PromptCacheInfo::valid() const {
  return std::all_of(layers.begin(), layers.end(), [](const LayerInfo& l) { return l.errors.empty(); });
}

std::string PromptCacheInfo::format() const {
  return compression ? "safetensors+" + compression->codec : "safetensors";
}

PromptCacheReader::PromptCacheReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PromptCacheReader::~PromptCacheReader() = default;

Result<std::unique_ptr<PromptCacheReader>> PromptCacheReader::Open(Env* env, const std::string& path,
                                                                   const Options& options) {
  auto r = std::make_unique<Impl>();
  r->path = path;
  r->threads = options.threads;
  r->prefetch = options.prefetch;
  KV_ASSIGN_OR_RETURN(r->file, env->OpenReadable(path));
  r->info.file_bytes = r->file->size();
  // Another engine's cache, which kvtool reads and converts: NotSupported
  // here, as a request this reader cannot do.
  if (RecognizeFileKind(r->file->data()) == FileKind::kLlamaState) {
    return Status::NotSupported(NotSafetensorsMessage(path, FileKind::kLlamaState));
  }
  if (!IsZstdFrame(r->file->data())) {
    Result<std::shared_ptr<const SafetensorsFile>> st = SafetensorsFile::FromReadable(r->file, options.limits);
    if (!st.ok()) return NotAPromptCache(path, r->file->data(), st.status());
    r->plain = *st;
  } else {
    Result<ZstdSeekableReader> z = ZstdSeekableReader::Open(*r->file, LimitsFor(r->file->size()));
    if (!z.ok()) return NotAPromptCache(path, r->file->data(), z.status());
    r->info.compression =
        CompressionInfo{std::string(ZstdCodecName(z->codec())), z->frames().size(), r->file->size()};
    if (options.decompress_at_open) {
      auto storage = Storage::AllocateUninitialized(z->decompressed_size());
      KV_RETURN_IF_ERROR(z->ReadAll({storage->mutable_data(), storage->size()}, options.threads).WithPrefix(path));
      Result<std::shared_ptr<const SafetensorsFile>> st =
          SafetensorsFile::FromReadable(std::make_shared<MemoryFile>(path, storage), options.limits);
      if (!st.ok()) return st.status().WithPrefix(path);
      r->plain = *st;
    } else {
      Result<SafetensorsHeader> h = ReadCompressedHeader(*z, options.limits);
      if (!h.ok()) return h.status().WithPrefix(path);
      r->header = std::move(h).value();
      r->zstd = std::move(z).value();
    }
  }
  if (r->plain) r->header = r->plain->header();
  r->by_begin.resize(r->header.tensors.size());
  for (size_t i = 0; i < r->by_begin.size(); ++i) r->by_begin[i] = i;
  std::sort(r->by_begin.begin(), r->by_begin.end(),
            [&](size_t a, size_t b) { return r->header.tensors[a].begin < r->header.tensors[b].begin; });
  // 0.32's scalars are tensors: read them (a few bytes) from the mapping or
  // the frames holding them.
  const TensorFetch fetch = [impl = r.get()](const std::vector<size_t>& indices) { return impl->Fetch(indices); };
  Result<ParsedFile> parsed = ParseLayout(r->header, fetch);
  if (!parsed.ok()) return parsed.status().WithPrefix(path);
  r->parsed = std::move(parsed).value();
  KV_RETURN_IF_ERROR(CheckLayers(r->header, r->parsed.layers).WithPrefix(path));
  KV_RETURN_IF_ERROR(ReadDigests(*r));

  PromptCacheInfo& info = r->info;
  info.layout = r->parsed.layout;
  info.tensor_bytes = r->header.data_size;
  info.has_digests = r->parsed.has_digests;
  info.digest_algorithm = r->algorithm;
  info.user_metadata = r->parsed.user;
  if (!r->parsed.unsupported.ok()) info.unsupported = std::string(r->parsed.unsupported.message());
  for (size_t i = 0; i < r->parsed.layers.size(); ++i) info.layers.push_back(DescribeLayer(r->parsed.layers[i], i, r->header));
  info.header = r->header;
  DescribeMlxLmLoaders(r->parsed, r->header, info);
  return std::unique_ptr<PromptCacheReader>(new PromptCacheReader(std::move(r)));
}

const PromptCacheInfo& PromptCacheReader::info() const { return impl_->info; }
size_t PromptCacheReader::num_layers() const { return impl_->parsed.layers.size(); }
const std::string& PromptCacheReader::path() const { return impl_->path; }

Result<std::shared_ptr<Cache>> PromptCacheReader::ReadLayer(size_t index, bool verify) const {
  const Impl& r = *impl_;
  const ParsedLayer& layer = r.parsed.layers[index];
  KV_RETURN_IF_ERROR(r.parsed.unsupported.WithPrefix(r.path));
  // Refused from the header alone, before any byte is read.
  KV_RETURN_IF_ERROR(r.LayerProblem(index));
  if (verify) KV_RETURN_IF_ERROR(r.CheckHeaderDigest());
  KV_ASSIGN_OR_RETURN(TensorArrays arrays, r.Fetch(layer.tensors));
  if (verify) KV_RETURN_IF_ERROR(r.CheckTensors(layer.tensors, arrays));
  Result<std::unique_ptr<Cache>> built = BuildLayer(layer, arrays);
  if (!built.ok()) return FileError(built.status()).WithPrefix(r.LayerWhere(index));
  return std::shared_ptr<Cache>(std::move(built).value());
}

Result<VerifyReport> PromptCacheReader::Verify(int threads, const ProgressFn& progress) const {
  const Impl& r = *impl_;
  VerifyReport report;
  report.has_digests = r.parsed.has_digests;
  if (!report.has_digests) return report;
  if (!r.digests_readable || !r.header_digest_ok) report.mismatches.push_back(r.HeaderMismatch());
  if (!r.digests_readable) return report;
  const auto& tensors = r.header.tensors;
  const uint64_t total = r.header.data_size;
  // Batches of tensors keep memory bounded for compressed files and let the
  // caller's progress callback run on this thread.
  uint64_t done = 0;
  // A batch is at least 64 MiB (or every tensor left): enough work for all
  // workers, few thread starts for files of many small tensors.
  constexpr uint64_t kBatchBytes = uint64_t{64} << 20;
  for (size_t first = 0, last = 0; first < tensors.size(); first = last) {
    uint64_t bytes = 0;
    for (last = first; last < tensors.size() && (bytes < kBatchBytes || last == first); ++last) {
      bytes += tensors[last].nbytes();
    }
    std::vector<size_t> indices;
    for (size_t i = first; i < last; ++i) indices.push_back(i);
    // Plain files are hashed straight from the mapping.
    const Result<TensorArrays> fetched = r.plain ? Result<TensorArrays>(TensorArrays{}) : r.Fetch(indices);
    if (!fetched.ok()) return fetched.status();
    for (DigestMismatch& m : r.Mismatches(indices, *fetched, threads)) report.mismatches.push_back(std::move(m));
    done += bytes;
    if (progress) progress(done, total);
  }
  report.bytes_hashed = total;
  // Digests of tensors the file does not have.
  std::unordered_set<std::string_view> names;
  for (const TensorInfo& t : tensors) names.insert(t.name);
  for (const auto& [name, d] : r.digests) {
    if (!names.count(name)) report.mismatches.push_back(DigestMismatch{.tensor = name, .expected = d, .found = {}});
  }
  return report;
}

}  // namespace kvstore
