// Prompt-cache files: save/load in mlx-lm's layout, digests, compression
// (docs/format.md §5).
#include "kvstore/prompt_cache_file.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "kvstore/arrays_cache.h"
#include "kvstore/json.h"
#include "kvstore/kv_cache.h"
#include "kvstore/zstd_seekable.h"
#include "libkvstore/format/digests.h"
#include "libkvstore/format/tree.h"
#include "libkvstore/util/parallel.h"

namespace kvstore {

std::string_view LayoutName(PromptCacheLayout layout) {
  switch (layout) {
    case PromptCacheLayout::kMlxLm: return "mlx-lm";
    case PromptCacheLayout::kMlxSwiftLm: return "mlx-swift-lm";
    case PromptCacheLayout::kMlxLmLegacy: return "mlx-lm-legacy";
  }
  return "unknown";
}

bool IsKvstoreMetadataKey(std::string_view user_key) {
  return user_key == kFormatKey || user_key == kTensorDigestsKey || user_key == kHeaderDigestKey;
}

namespace {

constexpr char kFormatValue[] = "kvstore/1";

// ---- Opening (plain or compressed) ----

class MemoryFile : public ReadableFile {
 public:
  MemoryFile(std::string path, std::shared_ptr<Storage> storage)
      : ReadableFile(std::move(path)), storage_(std::move(storage)) {}
  std::span<const std::byte> data() const override { return {storage_->data(), storage_->size()}; }

 private:
  std::shared_ptr<Storage> storage_;
};

struct OpenedFile {
  std::shared_ptr<const SafetensorsFile> st;  // null when only the header was read
  SafetensorsHeader header;
  uint64_t file_bytes = 0;
  std::optional<CompressionInfo> compression;
};

ZstdReadLimits LimitsFor(uint64_t compressed_size) {
  // Declared sizes beyond a generous ratio are refused before allocating.
  ZstdReadLimits limits;
  limits.max_decompressed_size = std::min<uint64_t>(limits.max_decompressed_size,
                                                    compressed_size * 1024 + (uint64_t{1} << 20));
  return limits;
}

Result<OpenedFile> Open(Env* env, const std::string& path, const ParseLimits& limits, bool header_only,
                        int threads) {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const ReadableFile> file, env->OpenReadable(path));
  OpenedFile out;
  out.file_bytes = file->size();
  if (!IsZstdFrame(file->data())) {
    Result<std::shared_ptr<const SafetensorsFile>> st = SafetensorsFile::FromReadable(file, limits);
    if (!st.ok()) return st.status().WithPrefix(path);
    out.st = *st;
    out.header = (*st)->header();
    return out;
  }
  Result<ZstdSeekableReader> reader = ZstdSeekableReader::Open(file->data(), LimitsFor(file->size()));
  if (!reader.ok()) return reader.status().WithPrefix(path);
  out.compression = CompressionInfo{"zstd", reader->frames().size(), file->size()};
  if (header_only) {
    std::vector<std::byte> prefix(std::min<uint64_t>(8, reader->decompressed_size()));
    KV_RETURN_IF_ERROR(reader->Read(0, prefix));
    Result<uint64_t> n = ParseSafetensorsHeaderSize(prefix, reader->decompressed_size(), limits);
    if (!n.ok()) return n.status().WithPrefix(path);
    prefix.resize(8 + *n);
    KV_RETURN_IF_ERROR(reader->Read(0, prefix));
    Result<SafetensorsHeader> h = ParseSafetensorsHeader(prefix, reader->decompressed_size(), limits);
    if (!h.ok()) return h.status().WithPrefix(path);
    out.header = std::move(h).value();
    return out;
  }
  auto storage = Storage::AllocateUninitialized(reader->decompressed_size());
  KV_RETURN_IF_ERROR(reader->ReadAll({storage->mutable_data(), storage->size()}, threads).WithPrefix(path));
  auto plain = std::make_shared<MemoryFile>(path, storage);
  Result<std::shared_ptr<const SafetensorsFile>> st = SafetensorsFile::FromReadable(plain, limits);
  if (!st.ok()) return st.status().WithPrefix(path);
  out.st = *st;
  out.header = (*st)->header();
  return out;
}

// ---- Layout ----

struct ParsedLayout {
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm;
  std::vector<std::string> classes;
  std::vector<MetaState> metas;
  std::vector<CacheState::List> unused;
  NameTree tensors;                         // mlx-lm: tensor names
  std::vector<const NameTree*> layer_trees;  // per layer, nullptr = no tensors
  std::vector<std::pair<int64_t, int64_t>> legacy;  // per layer: keys/values tensor index
  Metadata user;
  bool has_digests = false;
};

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// "{i}_keys" / "{i}_values" -> (i, is_keys)
std::optional<std::pair<size_t, bool>> LegacyName(std::string_view name) {
  const size_t u = name.find('_');
  if (u == 0 || u == std::string_view::npos || u > 6) return std::nullopt;
  for (size_t i = 0; i < u; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  }
  const std::string_view suffix = name.substr(u + 1);
  if (suffix != "keys" && suffix != "values") return std::nullopt;
  return std::make_pair(static_cast<size_t>(std::stoul(std::string(name.substr(0, u)))), suffix == "keys");
}

Status Layout(const SafetensorsHeader& h, ParsedLayout& out) {
  for (const auto& [k, v] : h.metadata) {
    if (k == kTensorDigestsMetaKey || k == kHeaderDigestMetaKey) out.has_digests = true;
  }
  bool has_classes = false;
  for (const auto& [k, v] : h.metadata) has_classes = has_classes || StartsWith(k, "2.");
  // The first cache_prompt format: per-layer "{i}_keys"/"{i}_values".
  if (!has_classes && !h.tensors.empty() &&
      std::all_of(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& t) { return LegacyName(t.name).has_value(); })) {
    out.layout = PromptCacheLayout::kMlxLmLegacy;
    size_t layers = 0;
    for (const TensorInfo& t : h.tensors) layers = std::max(layers, LegacyName(t.name)->first + 1);
    out.legacy.assign(layers, {-1, -1});
    for (size_t i = 0; i < h.tensors.size(); ++i) {
      auto [layer, is_keys] = *LegacyName(h.tensors[i].name);
      (is_keys ? out.legacy[layer].first : out.legacy[layer].second) = static_cast<int64_t>(i);
    }
    for (size_t i = 0; i < layers; ++i) {
      if (out.legacy[i].first < 0 || out.legacy[i].second < 0) {
        return Status::Corruption("legacy prompt cache: layer " + std::to_string(i) + " lacks keys or values");
      }
      out.classes.emplace_back("KVCache");
      out.metas.emplace_back("");
    }
    for (const auto& [k, v] : h.metadata) out.user.emplace_back(k, v);
    return Status::OK();
  }

  // mlx-lm: metadata unflattens to [metas, user metadata, classes].
  NameTree meta_tree;
  std::vector<std::string> meta_values;
  for (const auto& [k, v] : h.metadata) {
    if (StartsWith(k, "1.")) {
      const std::string user_key = k.substr(2);
      if (user_key == "__mlx_lm_state_version") {
        out.layout = PromptCacheLayout::kMlxSwiftLm;
        return Status::NotSupported("mlx-swift-lm layout (model state extension) is not supported");
      }
      if (!IsKvstoreMetadataKey(user_key)) out.user.emplace_back(user_key, v);
      continue;
    }
    if (!StartsWith(k, "0.") && !StartsWith(k, "2.") && k != "0" && k != "2") {
      return Status::NotSupported("unknown prompt-cache layout: metadata key \"" + k +
                                  "\" is outside mlx-lm's 0./1./2. namespaces");
    }
    KV_RETURN_IF_ERROR(meta_tree.Insert(k, static_cast<int64_t>(meta_values.size())));
    meta_values.push_back(v);
  }
  const NameTree* classes = meta_tree.Child("2");
  if (classes == nullptr) {
    if (h.tensors.empty() && h.metadata.empty()) return Status::OK();  // an empty prompt cache
    return Status::NotSupported("unknown prompt-cache layout: no class names (2.*) in the metadata");
  }
  auto class_list = classes->AsList();
  if (!class_list) {
    return Status::NotSupported("unknown prompt-cache layout: class names are not a list (mlx-lm v2?)");
  }
  for (size_t i = 0; i < class_list->size(); ++i) {
    const NameTree* c = (*class_list)[i];
    if (c == nullptr || c->leaf < 0) {
      return Status::Corruption("class name of layer " + std::to_string(i) + " is missing");
    }
    std::string name = meta_values[static_cast<size_t>(c->leaf)];
    if (StartsWith(name, "__mlx_lm_state_v1__:")) {
      out.layout = PromptCacheLayout::kMlxSwiftLm;
      return Status::NotSupported("mlx-swift-lm layout (model state extension) is not supported");
    }
    out.classes.push_back(std::move(name));
  }
  const size_t layers = out.classes.size();
  out.metas.assign(layers, MetaState(MetaState::List{}));
  if (const NameTree* metas = meta_tree.Child("0")) {
    auto list = metas->AsList();
    if (!list) return Status::NotSupported("unknown prompt-cache layout: meta states are not a list (mlx-lm v2?)");
    if (list->size() > layers) {
      return Status::Corruption(std::to_string(list->size()) + " meta states for " + std::to_string(layers) + " layers");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i] == nullptr) continue;
      KV_ASSIGN_OR_RETURN(out.metas[i], MetaFromTree(*(*list)[i], meta_values));
    }
  }
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    KV_RETURN_IF_ERROR(out.tensors.Insert(h.tensors[i].name, static_cast<int64_t>(i)));
  }
  auto tensor_layers = out.tensors.AsList();
  if (!tensor_layers) return Status::Corruption("tensor names do not start with a layer index");
  if (tensor_layers->size() > layers) {
    return Status::Corruption("tensors for " + std::to_string(tensor_layers->size()) + " layers but " +
                              std::to_string(layers) + " class names");
  }
  out.layer_trees.assign(layers, nullptr);
  for (size_t i = 0; i < tensor_layers->size(); ++i) out.layer_trees[i] = (*tensor_layers)[i];
  // mlx-swift-lm writes KVCache's meta as [""] where mlx-lm writes "".
  for (size_t i = 0; i < layers; ++i) {
    if (out.classes[i] == "KVCache" && out.metas[i].is_list() && out.metas[i].size() == 1) {
      out.layout = PromptCacheLayout::kMlxSwiftLm;
      return Status::NotSupported("mlx-swift-lm layout detected (layer " + std::to_string(i) +
                                  "); reading it is not supported yet");
    }
  }
  return Status::OK();
}

// ---- Integrity ----

Status CheckDigests(const SafetensorsFile& file, int threads, VerifyReport& report) {
  const SafetensorsHeader& h = file.header();
  auto tensors_json = h.FindMetadata(kTensorDigestsMetaKey);
  auto header_digest = h.FindMetadata(kHeaderDigestMetaKey);
  report.has_digests = tensors_json.has_value() || header_digest.has_value();
  if (!report.has_digests) return Status::OK();
  if (!tensors_json || !header_digest) {
    report.mismatches.emplace_back("header");
    return Status::OK();
  }
  std::optional<Sha256Digest> want_header = Sha256Digest::FromHex(*header_digest);
  if (!want_header || Sha256(std::string_view(CanonicalHeader(h.tensors, h.metadata))) != *want_header) {
    report.mismatches.emplace_back("header");
  }
  Result<std::map<std::string, Sha256Digest>> want = DigestsFromJson(*tensors_json);
  if (!want.ok()) {
    report.mismatches.emplace_back("header");
    return Status::OK();
  }
  std::vector<Sha256Digest> got(h.tensors.size());
  KV_RETURN_IF_ERROR(ParallelFor(h.tensors.size(), threads, [&](size_t i) {
    got[i] = Sha256(file.TensorBytes(h.tensors[i]));
    return Status::OK();
  }));
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    report.bytes_hashed += h.tensors[i].nbytes();
    auto it = want->find(h.tensors[i].name);
    if (it == want->end() || it->second != got[i]) report.mismatches.push_back(h.tensors[i].name);
  }
  if (want->size() != h.tensors.size()) {
    for (const auto& [name, d] : *want) {
      if (h.FindTensor(name) == nullptr) report.mismatches.push_back(name);
    }
  }
  return Status::OK();
}

std::string MismatchMessage(const VerifyReport& r) {
  std::string msg = "integrity check failed for ";
  for (size_t i = 0; i < r.mismatches.size() && i < 8; ++i) {
    if (i > 0) msg += ", ";
    msg += r.mismatches[i] == "header" ? "the header" : "tensor \"" + r.mismatches[i] + "\"";
  }
  if (r.mismatches.size() > 8) msg += " and " + std::to_string(r.mismatches.size() - 8) + " more";
  return msg;
}

// ---- Building caches ----

Result<std::unique_ptr<Cache>> BuildLayer(const ParsedLayout& p, size_t i, const SafetensorsFile& file,
                                          const std::vector<Array>& arrays) {
  if (p.layout == PromptCacheLayout::kMlxLmLegacy) {
    return CacheFromState("KVCache",
                          CacheState({arrays[static_cast<size_t>(p.legacy[i].first)],
                                      arrays[static_cast<size_t>(p.legacy[i].second)]}),
                          MetaState(""));
  }
  (void)file;
  CacheState state = CacheState(CacheState::List{});
  if (p.layer_trees[i] != nullptr) {
    KV_ASSIGN_OR_RETURN(state, StateFromTree(*p.layer_trees[i], arrays));
  }
  const std::string& cls = p.classes[i];
  // Pre-2026-08 ArraysCache files hold a flat slot list (spec §14.8).
  if ((cls == "ArraysCache" || cls == "MambaCache") && state.is_list() && state.size() > 0 &&
      state[0].is_array()) {
    std::unique_ptr<ArraysCache> legacy =
        cls == "MambaCache" ? std::make_unique<MambaCache>() : std::make_unique<ArraysCache>(0);
    KV_RETURN_IF_ERROR(legacy->SetLegacyState(state));
    KV_RETURN_IF_ERROR(legacy->SetMetaState(p.metas[i]));
    return std::unique_ptr<Cache>(std::move(legacy));
  }
  return CacheFromState(cls, state, p.metas[i]);
}

// ---- Saving ----

Status CheckUserKey(const std::string& key) {
  if (key.empty() || key.find('.') != std::string::npos) {
    return Status::InvalidArgument("user metadata key \"" + key +
                                   "\" must be non-empty and dot-free (mlx-lm would nest it)");
  }
  if (std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || c == '-'; })) {
    return Status::InvalidArgument("user metadata key \"" + key + "\" must not be an integer");
  }
  if (IsKvstoreMetadataKey(key)) {
    return Status::InvalidArgument("user metadata key \"" + key + "\" is reserved by kvstore");
  }
  return Status::OK();
}

// A WritableFile that compresses into a seekable zstd container; the first
// Append (the safetensors header) gets a frame of its own.
class ZstdFile : public WritableFile {
 public:
  ZstdFile(WritableFile* out, const ZstdWriteOptions& options) : writer_(out, options) {}
  Status Append(std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(writer_.Append(data));
    if (first_) {
      first_ = false;
      return writer_.EndFrame();
    }
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return writer_.Finish(); }
  uint64_t size() const override { return writer_.uncompressed_bytes(); }

 private:
  ZstdSeekableWriter writer_;
  bool first_ = true;
};

}  // namespace

Status SavePromptCache(Env* env, const std::string& path, const PromptCache& cache,
                       const Metadata& user_metadata, const SavePromptCacheOptions& options) {
  std::vector<NamedArray> tensors;
  Metadata metadata;
  for (size_t i = 0; i < cache.size(); ++i) {
    const std::string index = std::to_string(i);
    if (cache[i] == nullptr) return Status::InvalidArgument("layer " + index + " is null");
    Result<CacheState> state = cache[i]->State();
    if (!state.ok()) {
      return Status::InvalidArgument("layer " + index + " (" + std::string(cache[i]->class_name()) +
                                     ") cannot be saved: " + std::string(state.status().message()));
    }
    KV_RETURN_IF_ERROR(FlattenState(*state, index, tensors).WithPrefix("layer " + index));
    FlattenMeta(cache[i]->meta_state(), "0." + index, metadata);
    // MambaCache is saved under mlx-lm's current name (docs/compat.md).
    const std::string_view cls = cache[i]->class_name() == "MambaCache" ? "ArraysCache" : cache[i]->class_name();
    metadata.emplace_back("2." + index, std::string(cls));
  }
  for (const auto& [k, v] : user_metadata) {
    KV_RETURN_IF_ERROR(CheckUserKey(k));
    metadata.emplace_back("1." + k, v);
  }
  if (options.integrity) {
    metadata.emplace_back("1." + std::string(kFormatKey), kFormatValue);
    KV_ASSIGN_OR_RETURN(auto digests, DigestArrays(tensors, options.threads));
    std::vector<TensorInfo> infos;
    for (const NamedArray& t : tensors) infos.push_back(TensorInfo{t.name, t.array.dtype(), t.array.shape(), 0, 0});
    const std::string header = CanonicalHeader(infos, metadata);
    metadata.emplace_back(std::string(kTensorDigestsMetaKey), DigestsToJson(digests));
    metadata.emplace_back(std::string(kHeaderDigestMetaKey), Sha256(std::string_view(header)).ToHex());
  }
  SafetensorsWriteOptions write;
  write.alignment = options.alignment;
  return WriteFileAtomic(env, path, [&](WritableFile& file) -> Status {
    if (!options.compression_level) return WriteSafetensors(file, tensors, metadata, write);
    ZstdWriteOptions z;
    z.level = *options.compression_level;
    z.frame_size = options.frame_size;
    z.threads = options.threads;
    ZstdFile compressed(&file, z);
    KV_RETURN_IF_ERROR(WriteSafetensors(compressed, tensors, metadata, write));
    return compressed.Close();
  });
}

Result<LoadedPromptCache> LoadPromptCache(Env* env, const std::string& path, const LoadPromptCacheOptions& options) {
  KV_ASSIGN_OR_RETURN(OpenedFile opened, Open(env, path, options.limits, false, options.threads));
  const SafetensorsFile& file = *opened.st;
  ParsedLayout layout;
  KV_RETURN_IF_ERROR(Layout(file.header(), layout).WithPrefix(path));
  LoadedPromptCache out;
  out.layout = layout.layout;
  out.compressed = opened.compression.has_value();
  out.has_digests = layout.has_digests;
  out.user_metadata = layout.user;
  if (options.verify) {
    VerifyReport report;
    KV_RETURN_IF_ERROR(CheckDigests(file, options.threads, report));
    if (!report.has_digests) return Status::FailedPrecondition(path + ": the file carries no digests to verify");
    if (!report.mismatches.empty()) return Status::Corruption(path + ": " + MismatchMessage(report));
    out.verified = true;
  }
  std::vector<Array> arrays;
  for (const TensorInfo& t : file.header().tensors) {
    KV_ASSIGN_OR_RETURN(Array a, file.Tensor(t));
    arrays.push_back(std::move(a));
  }
  for (size_t i = 0; i < layout.classes.size(); ++i) {
    Result<std::unique_ptr<Cache>> layer = BuildLayer(layout, i, file, arrays);
    if (!layer.ok()) {
      Status s = layer.status();
      const std::string where = path + ": layer " + std::to_string(i) + " (" + layout.classes[i] + ")";
      if (s.code() == StatusCode::kInvalidArgument) return Status::Corruption(where + ": " + std::string(s.message()));
      return s.WithPrefix(where);
    }
    out.cache.push_back(std::shared_ptr<Cache>(std::move(layer).value()));
  }
  return out;
}

namespace {

void CollectTensors(const SafetensorsHeader& h, const std::string& prefix, std::vector<LayerTensor>& out) {
  for (const TensorInfo& t : h.tensors) {
    if (StartsWith(t.name, prefix)) out.push_back(LayerTensor{t.name, t.dtype, t.shape, t.nbytes()});
  }
}

}  // namespace

Result<PromptCacheInfo> ReadPromptCacheInfo(Env* env, const std::string& path, const ParseLimits& limits) {
  KV_ASSIGN_OR_RETURN(OpenedFile opened, Open(env, path, limits, true, 1));
  ParsedLayout layout;
  KV_RETURN_IF_ERROR(Layout(opened.header, layout).WithPrefix(path));
  PromptCacheInfo info;
  info.layout = layout.layout;
  info.file_bytes = opened.file_bytes;
  info.tensor_bytes = opened.header.data_size;
  info.compression = opened.compression;
  info.has_digests = layout.has_digests;
  info.user_metadata = layout.user;
  for (size_t i = 0; i < layout.classes.size(); ++i) {
    LayerInfo layer;
    layer.index = i;
    layer.class_name = layout.classes[i];
    layer.meta_state = layout.metas[i];
    const std::string prefix = std::to_string(i);
    if (layout.layout == PromptCacheLayout::kMlxLmLegacy) {
      CollectTensors(opened.header, prefix + "_", layer.tensors);
    } else {
      CollectTensors(opened.header, prefix + ".", layer.tensors);
    }
    const MetaState& m = layer.meta_state;
    if (layer.class_name == "CacheList" && m.is_list() && m.size() == 2 && m[0].is_list() && m[1].is_list()) {
      for (size_t c = 0; c < m[0].size(); ++c) {
        LayerInfo child;
        child.index = c;
        child.class_name = m[0][c].is_string() ? m[0][c].str() : "?";
        if (c < m[1].size()) child.meta_state = m[1][c];
        CollectTensors(opened.header, prefix + "." + std::to_string(c) + ".", child.tensors);
        layer.children.push_back(std::move(child));
      }
    }
    info.layers.push_back(std::move(layer));
  }
  info.header = std::move(opened.header);
  return info;
}

Result<VerifyReport> VerifyPromptCacheFile(Env* env, const std::string& path, int threads) {
  KV_ASSIGN_OR_RETURN(OpenedFile opened, Open(env, path, ParseLimits{}, false, threads));
  VerifyReport report;
  KV_RETURN_IF_ERROR(CheckDigests(*opened.st, threads, report));
  return report;
}

}  // namespace kvstore
