#include "libkvstore/format/writer.h"

#include <map>

#include "libkvstore/format/digests.h"
#include "libkvstore/format/hash_pipeline.h"
#include "libkvstore/format/layout.h"
#include "libkvstore/integrity/digest.h"

namespace kvstore {
namespace {

constexpr char kFormatValue[] = "kvstore/1";
// Bytes being hashed behind the writer at most (the arrays stay alive).
constexpr uint64_t kMaxHashBacklog = uint64_t{256} << 20;
constexpr uint64_t kProgressStep = uint64_t{4} << 20;
constexpr size_t kSmallTensorBytes = 64;

// The most recently flattened layer, so that consecutive tensors of one
// layer cost one call of the source.
class LayerCursor {
 public:
  LayerCursor(const LayerSource& source, PromptCacheLayout layout) : source_(source), layout_(layout) {}

  Result<const FlatLayer*> Get(size_t index) {
    if (flat_ && index_ == index) return &*flat_;
    flat_.reset();
    Result<std::shared_ptr<const Cache>> cache = source_(index);
    if (!cache.ok()) return cache.status();
    if (*cache == nullptr) return Status::InvalidArgument("layer " + std::to_string(index) + " is null");
    KV_ASSIGN_OR_RETURN(FlatLayer flat, FlattenLayer(**cache, index, layout_));
    flat_ = std::move(flat);
    index_ = index;
    return &*flat_;
  }

 private:
  const LayerSource& source_;
  PromptCacheLayout layout_;
  std::optional<FlatLayer> flat_;
  size_t index_ = 0;
};

struct PlannedTensor {
  size_t layer;
  size_t slot;  // position in the layer's FlatLayer::tensors
};

// A WritableFile that compresses into a seekable zstd container. The first
// Append (the safetensors header) becomes a raw frame of its own, whose size
// depends only on the header's length, so WriteAt(0, header) can replace it
// once the digests are known.
class ZstdFile : public WritableFile {
 public:
  ZstdFile(WritableFile* out, const ZstdWriteOptions& options) : out_(out), writer_(out, options) {}
  Status Append(std::span<const std::byte> data) override {
    if (first_) {
      first_ = false;
      header_bytes_ = data.size();
      return writer_.AppendRawFrame(data);
    }
    return writer_.Append(data);
  }
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    if (offset != 0 || data.size() != header_bytes_) {
      return Status::InvalidArgument("a compressed file can only have its header frame replaced");
    }
    return out_->WriteAt(0, writer_.RawFrame(data));
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return writer_.Finish(); }
  uint64_t size() const override { return writer_.uncompressed_bytes(); }

 private:
  WritableFile* out_;
  ZstdSeekableWriter writer_;
  bool first_ = true;
  uint64_t header_bytes_ = 0;
};

class Saver {
 public:
  Saver(size_t num_layers, const LayerSource& source, const SavePromptCacheOptions& options,
        const WriterHooks& hooks)
      : num_layers_(num_layers), options_(options), hooks_(hooks), cursor_(source, options.layout) {}

  Status Plan(const Metadata& user_metadata);
  Status Write(WritableFile& out);

 private:
  Result<SafetensorsLayout> Layout() const;
  void Progress(uint64_t bytes);
  Status Seal();

  const size_t num_layers_;
  const SavePromptCacheOptions& options_;
  const WriterHooks& hooks_;
  LayerCursor cursor_;
  std::vector<TensorInfo> specs_;
  std::map<std::string, PlannedTensor> planned_;
  // Tiny tensors (mlx-lm 0.32's scalars) kept from the plan: they come
  // first in the data order (largest element size first, and the
  // scalars are 4 or 8 bytes wide), and refetching a layer for them would
  // build it once more.
  std::map<std::string, Array> small_;
  Metadata metadata_;
  std::map<std::string, Digest> digests_;
  uint64_t total_bytes_ = 0, done_bytes_ = 0, reported_ = 0;
};

void Saver::Progress(uint64_t bytes) {
  done_bytes_ += bytes;
  if (options_.progress && (done_bytes_ - reported_ >= kProgressStep || done_bytes_ == total_bytes_)) {
    reported_ = done_bytes_;
    options_.progress(done_bytes_, total_bytes_);
  }
}

// Whether the loader of the other mlx-lm layout would load this file as []
// without a word (docs/compat.md): mlx-lm 0.32 an older file of one layer
// without user metadata, the older loaders a 0.32 file without user
// metadata. A user-metadata entry makes them fail loudly instead.
bool OtherLoaderWouldLoadEmpty(PromptCacheLayout layout, size_t num_layers, bool has_user_metadata) {
  if (has_user_metadata) return false;
  if (layout == PromptCacheLayout::kMlxLm032) return num_layers >= 1;
  return (layout == PromptCacheLayout::kMlxLm || layout == PromptCacheLayout::kMlxLm031) && num_layers == 1;
}

Status Saver::Plan(const Metadata& user_metadata) {
  const std::string prefix(UserPrefix(options_.layout));
  const bool v032 = options_.layout == PromptCacheLayout::kMlxLm032;
  if (v032) metadata_.emplace_back("2.0", "");  // the scalar list's first entry, always present
  size_t scalars = 0;
  for (size_t i = 0; i < num_layers_; ++i) {
    KV_ASSIGN_OR_RETURN(const FlatLayer* flat, cursor_.Get(i));
    for (size_t k = 0; k < flat->tensors.size(); ++k) {
      const NamedArray& t = flat->tensors[k];
      specs_.push_back(TensorInfo{t.name, t.array.dtype(), t.array.shape(), 0, 0});
      planned_[t.name] = PlannedTensor{i, k};
      if (t.array.nbytes() <= kSmallTensorBytes) small_[t.name] = t.array;
      total_bytes_ += t.array.nbytes();
    }
    metadata_.insert(metadata_.end(), flat->metadata.begin(), flat->metadata.end());
    for (const auto& [name, kind] : flat->scalars) {
      const std::string key = "2." + std::to_string(++scalars);
      metadata_.emplace_back(key + ".0", name);
      metadata_.emplace_back(key + ".1", kind);
    }
  }
  for (const auto& [k, v] : user_metadata) {
    KV_RETURN_IF_ERROR(CheckUserKey(k, options_.layout));
    metadata_.emplace_back(prefix + k, v);
  }
  const bool guard = OtherLoaderWouldLoadEmpty(options_.layout, num_layers_, !user_metadata.empty());
  if (!options_.integrity) {
    if (guard) metadata_.emplace_back(prefix + std::string(kFormatKey), kFormatValue);
    return Status::OK();
  }
  metadata_.emplace_back(prefix + std::string(kFormatKey), kFormatValue);
  const DigestAlgorithm algorithm = options_.digest;
  const DigestKeys keys = DigestKeysFor(algorithm, prefix);
  if (algorithm != DigestAlgorithm::kSha256) {
    metadata_.emplace_back(keys.algorithm, std::string(DigestAlgorithmName(algorithm)));
  }
  const std::string canonical = CanonicalHeader(specs_, metadata_);
  metadata_.emplace_back(keys.header, ComputeDigest(algorithm, std::string_view(canonical)).ToHex());
  if (hooks_.seal) metadata_.emplace_back(keys.hmac, std::string(2 * Sha256Digest::kSize, '0'));
  // Placeholders of the final length; the header is rewritten at the end.
  for (const TensorInfo& t : specs_) digests_[t.name] = Digest(algorithm);
  return Status::OK();
}

Result<SafetensorsLayout> Saver::Layout() const {
  Metadata metadata = metadata_;
  if (options_.integrity) {
    metadata.emplace_back(DigestKeysFor(options_.digest, UserPrefix(options_.layout)).tensors, DigestsToJson(digests_));
  }
  SafetensorsWriteOptions write;
  write.alignment = options_.alignment;
  return PlanSafetensors(std::span<const TensorInfo>(specs_), metadata, write);
}

// Fills in the HMAC placeholder once the tensor digests are known.
Status Saver::Seal() {
  const DigestKeys keys = DigestKeysFor(options_.digest, UserPrefix(options_.layout));
  std::string header_hex;
  for (const auto& [k, v] : metadata_) {
    if (k == keys.header) header_hex = v;
  }
  for (auto& [k, v] : metadata_) {
    if (k != keys.hmac) continue;
    std::string sealed = hooks_.seal(header_hex, DigestsToJson(digests_));
    if (sealed.size() != v.size()) return Status::Internal("the HMAC seal is not 64 hex digits");
    v = std::move(sealed);
  }
  return Status::OK();
}

Status Saver::Write(WritableFile& out) {
  KV_ASSIGN_OR_RETURN(SafetensorsLayout layout, Layout());
  KV_RETURN_IF_ERROR(out.Append(std::as_bytes(std::span(layout.header_bytes))));
  // Hashing while writing serves the digests and the check of bytes copied
  // from a file with digests.
  std::optional<HashPipeline> hasher, checker;
  if (options_.integrity) hasher.emplace(options_.digest, options_.threads, kMaxHashBacklog);
  if (hooks_.expected_digest && (!hasher || hooks_.expected_algorithm != options_.digest)) {
    checker.emplace(hooks_.expected_algorithm, options_.threads, kMaxHashBacklog);
  }
  std::vector<std::optional<ExpectedDigest>> expected(layout.tensors.size());
  for (size_t id = 0; id < layout.tensors.size(); ++id) {
    const TensorInfo& info = layout.tensors[id];
    const PlannedTensor& p = planned_.at(info.name);
    const Array* small = nullptr;
    if (auto it = small_.find(info.name); it != small_.end()) small = &it->second;
    const FlatLayer* flat = nullptr;
    if (small == nullptr) {
      KV_ASSIGN_OR_RETURN(flat, cursor_.Get(p.layer));
      if (p.slot >= flat->tensors.size() || flat->tensors[p.slot].name != info.name ||
          flat->tensors[p.slot].array.dtype() != info.dtype || flat->tensors[p.slot].array.shape() != info.shape) {
        return Status::Internal("layer " + std::to_string(p.layer) + " changed between the passes of a save");
      }
    }
    const Array& a = small != nullptr ? *small : flat->tensors[p.slot].array;
    if (hooks_.expected_digest) expected[id] = hooks_.expected_digest(a);
    if (hasher) hasher->Submit(id, a);
    if (checker) checker->Submit(id, a);
    KV_RETURN_IF_ERROR(AppendArrayBytes(out, a));
    Progress(a.nbytes());
  }
  const std::vector<Digest> got = hasher ? hasher->Finish() : std::vector<Digest>();
  const std::vector<Digest> checked = checker ? checker->Finish() : got;
  for (size_t id = 0; id < layout.tensors.size(); ++id) {
    const std::string& name = layout.tensors[id].name;
    if (expected[id] && expected[id]->digest != checked[id]) {
      const DigestMismatch m{.tensor = expected[id]->tensor, .expected = expected[id]->digest, .found = checked[id]};
      return Status::Corruption(m.Message(expected[id]->path) + " (copied to '" + name + "')");
    }
    if (hasher) digests_[name] = got[id];
  }
  if (!options_.integrity) return Status::OK();
  if (hooks_.seal) KV_RETURN_IF_ERROR(Seal());
  KV_ASSIGN_OR_RETURN(SafetensorsLayout final_layout, Layout());
  if (final_layout.header_bytes.size() != layout.header_bytes.size()) {
    return Status::Internal("the header changed length when its digests were filled in");
  }
  return out.WriteAt(0, std::as_bytes(std::span(final_layout.header_bytes)));
}

// The file's bytes, plain or inside the zstd container.
Status WriteSaved(Saver& saver, WritableFile& file, const SavePromptCacheOptions& options) {
  if (!options.compression_level) return saver.Write(file);
  KV_RETURN_IF_ERROR(CheckZstdLevel(*options.compression_level));
  ZstdWriteOptions z;
  z.level = *options.compression_level;
  z.frame_size = options.frame_size;
  z.threads = options.threads;
  z.codec = options.codec;
  ZstdFile compressed(&file, z);
  KV_RETURN_IF_ERROR(saver.Write(compressed));
  return compressed.Close();
}

Status CheckWritableLayout(const SavePromptCacheOptions& options) {
  if (options.layout == PromptCacheLayout::kMlxLmLegacy) {
    return Status::InvalidArgument("the legacy mlx-lm layout is read-only");
  }
  return Status::OK();
}

}  // namespace

Status SaveLayers(Env* env, const std::string& path, size_t num_layers, const LayerSource& source,
                  const Metadata& user_metadata, const SavePromptCacheOptions& options, const WriterHooks& hooks) {
  KV_RETURN_IF_ERROR(CheckWritableLayout(options));
  Saver saver(num_layers, source, options, hooks);
  KV_RETURN_IF_ERROR(saver.Plan(user_metadata));
  return WriteFileAtomic(
      env, path, [&](WritableFile& file) { return WriteSaved(saver, file, options); },
      AtomicWriteOptions{.durability = options.durability});
}

Status SaveLayersTo(WritableFile& file, size_t num_layers, const LayerSource& source, const Metadata& user_metadata,
                    const SavePromptCacheOptions& options, const WriterHooks& hooks) {
  KV_RETURN_IF_ERROR(CheckWritableLayout(options));
  Saver saver(num_layers, source, options, hooks);
  KV_RETURN_IF_ERROR(saver.Plan(user_metadata));
  return WriteSaved(saver, file, options);
}

}  // namespace kvstore
