// PromptCacheStore: opening and indexing a directory, saving entries.
#include "kvstore/prompt_cache_store.h"

#include <mutex>

#include "kvstore/model_fingerprint.h"
#include "kvstore/prompt_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/prompt_cache_store_impl.h"

namespace kvstore {
namespace {

// What a file's header says about it as a store entry.
struct ScannedFile {
  StoreKey key;
  int64_t bytes = 0;
  std::optional<ModelFingerprint> fingerprint;
};

std::optional<std::string_view> FindUserKey(const Metadata& metadata, std::string_view key) {
  for (const auto& [k, v] : metadata) {
    if (k == key) return v;
  }
  return std::nullopt;
}

// Reads the header of a file (no tensor bytes); it must be one of our
// files with digests and a key, every layer must be loadable as the header
// describes it (PromptCacheInfo::valid), so an impossible file is dropped at
// Open instead of failing each fetch, and a fingerprint it records must be
// valid.
Result<ScannedFile> ScanFile(Env* env, const std::string& path) {
  KV_ASSIGN_OR_RETURN(PromptCacheInfo info, ReadPromptCacheInfo(env, path));
  if (!info.has_digests) return Status::Corruption("not a store entry: no digests");
  if (!info.unsupported.empty()) return Status::NotSupported("not loadable: " + info.unsupported);
  for (const LayerInfo& layer : info.layers) {
    if (!layer.errors.empty()) {
      return Status::Corruption("layer " + std::to_string(layer.index) + ": " + layer.errors.front());
    }
  }
  std::optional<StoreKey> key = StoreKeyFromMetadata(info.user_metadata);
  if (!key) return Status::Corruption("not a store entry: no valid model/tokens keys");
  ScannedFile out{std::move(*key), static_cast<int64_t>(info.file_bytes), std::nullopt};
  if (std::optional<std::string_view> json = FindUserKey(info.user_metadata, kStoreFingerprintKey)) {
    KV_ASSIGN_OR_RETURN(ModelFingerprint fp, ModelFingerprint::FromJson(*json));
    out.fingerprint = std::move(fp);
  }
  return out;
}

std::string DigestHex(const std::optional<ModelFingerprint>& fp) { return fp ? fp->digest().ToHex() : ""; }

}  // namespace

Status PromptCacheStore::Impl::IndexDirectory(StoreOpenReport& report) {
  KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
  std::unordered_map<std::string, ManifestEntry> listed;
  if (auto m = env->OpenReadable(Path("MANIFEST")); m.ok()) listed = ReadManifest((*m)->data());
  for (const std::string& name : names) {
    if (IsStoreTempFileName(name)) {
      // We hold the directory's lock: no writer of ours is live.
      if (env->RemoveFile(Path(name)).ok()) ++report.temp_files_removed;
      continue;
    }
    if (!name.ends_with(kStoreFileSuffix)) continue;
    auto drop = [&](const std::string& why) {
      report.dropped.push_back(name + ": " + why);
      (void)env->RemoveFile(Path(name));
    };
    if (auto it = listed.find(name); it != listed.end()) {
      const ManifestEntry& m = it->second;
      Result<uint64_t> size = env->GetFileSize(Path(name));
      if (size.ok() && static_cast<int64_t>(*size) == m.bytes && StoreFileName(m.key.model, m.key.tokens) == name) {
        Add({name, m.key, m.bytes, m.fingerprint});
        ++report.entries;
        ++report.from_manifest;
        continue;
      }
      ++report.manifest_ignored;
    }
    Result<ScannedFile> scanned = ScanFile(env, Path(name));
    if (!scanned.ok() && scanned.status().code() == StatusCode::kIOError) {
      report.dropped.push_back(name + ": " + scanned.status().ToString() + " (left in place)");
      continue;  // maybe transient: a later Open may index it
    }
    if (!scanned.ok()) {
      drop(scanned.status().ToString());
      continue;
    }
    const std::string expected = StoreFileName(scanned->key.model, scanned->key.tokens);
    if (expected != name) {
      drop("holds the key of " + expected);
      ++mismatched_dropped;
      continue;
    }
    Add({name, std::move(scanned->key), scanned->bytes, DigestHex(scanned->fingerprint)});
    ++report.entries;
  }
  // Compact the manifest: one "+" line per entry, least recently used first.
  // (Open runs this before the store is shared: no lock needed.)
  KV_ASSIGN_OR_RETURN(manifest, env->NewWritableFile(Path("MANIFEST")));
  index.ForEach([&](const StoreIndex::Entry& e) {
    LogLocked(ManifestAddLine(e.file, e.bytes, e.key.model, e.key.tokens, e.fingerprint));
  });
  EvictLocked();
  return Status::OK();
}

PromptCacheStore::PromptCacheStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PromptCacheStore::~PromptCacheStore() = default;

Result<std::unique_ptr<PromptCacheStore>> PromptCacheStore::Open(Env* env, const std::string& dir,
                                                                 const PromptCacheStoreOptions& options,
                                                                 StoreOpenReport* report) {
  KV_RETURN_IF_ERROR(env->CreateDir(dir));
  Result<std::unique_ptr<FileLock>> lock = env->LockFile(dir + "/LOCK");
  if (!lock.ok()) return lock.status().WithPrefix("prompt-cache store " + dir);
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->dir = dir;
  impl->options = options;
  impl->lock = std::move(lock).value();
  StoreOpenReport local;
  KV_RETURN_IF_ERROR(impl->IndexDirectory(report ? *report : local));
  return std::unique_ptr<PromptCacheStore>(new PromptCacheStore(std::move(impl)));
}

Status PromptCacheStore::Impl::Put(const std::string& model, const std::optional<ModelFingerprint>& fingerprint,
                                   std::span<const int32_t> tokens, const PromptCache& cache) {
  if (tokens.empty()) return Status::InvalidArgument("PromptCacheStore: empty token key");
  KV_RETURN_IF_ERROR(CheckLeafTokens(cache, static_cast<int64_t>(tokens.size())).WithPrefix("PromptCacheStore"));
  const std::string file = StoreFileName(model, tokens);
  Metadata metadata = StoreKeyMetadata(model, tokens);
  if (fingerprint) metadata.emplace_back(std::string(kStoreFingerprintKey), fingerprint->json());
  // The store reads its own files only, so it writes mlx-lm's current
  // layout, which (unlike the 0.31 release's) holds every ArraysCache.
  SavePromptCacheOptions options;
  options.layout = PromptCacheLayout::kMlxLm;
  // Saved under a temp name (Open removes leftovers), then renamed into
  // place under the lock together with the index update: a Drop of the
  // entry this replaces (a fetch that found the old file corrupt) or an
  // eviction can then never remove the new file before it is indexed.
  const std::string staged =
      file + ".kvtmp-" + std::to_string(env->ProcessId()) + "-put" + std::to_string(next_staged.fetch_add(1));
  KV_RETURN_IF_ERROR(SavePromptCache(env, Path(staged), cache, metadata, options));
  Result<uint64_t> size = env->GetFileSize(Path(staged));
  if (!size.ok()) {
    (void)env->RemoveFile(Path(staged));
    return size.status();
  }
  {
    std::lock_guard<std::mutex> l(mu);
    if (Status renamed = env->RenameFile(Path(staged), Path(file)); !renamed.ok()) {
      (void)env->RemoveFile(Path(staged));
      return renamed;
    }
    AddLocked({file, StoreKey{model, std::vector<int32_t>(tokens.begin(), tokens.end())},
               static_cast<int64_t>(*size), DigestHex(fingerprint), 0, CanTrimPromptCache(cache)});
    EvictLocked();
  }
  return env->SyncDir(dir);  // the rename's durability; the entry is indexed either way
}

void PromptCacheStore::Impl::Refuse(const std::string& file, const ModelFingerprint& asked) {
  // The reason comes from the file's header; its tensors are never read.
  std::string why = "records no model fingerprint";
  if (Result<ScannedFile> scanned = ScanFile(env, Path(file)); scanned.ok() && scanned->fingerprint) {
    why = "written for another model configuration: " + scanned->fingerprint->DifferenceFrom(asked) +
          " (file != asked)";
  }
  std::lock_guard<std::mutex> l(mu);
  ++fingerprint_refused;
  last_refusal = file + ": " + why;
}

Status PromptCacheStore::Put(const std::string& model, std::span<const int32_t> tokens, const PromptCache& cache) {
  Result<ModelFingerprint> fp = ModelFingerprint::Of(model, cache);
  return impl_->Put(model, fp.ok() ? std::optional<ModelFingerprint>(*fp) : std::nullopt, tokens, cache);
}

Status PromptCacheStore::Put(const ModelFingerprint& model, std::span<const int32_t> tokens, const PromptCache& cache) {
  KV_RETURN_IF_ERROR(model.Check(cache));
  return impl_->Put(model.model_id(), model, tokens, cache);
}

Result<std::optional<PromptCacheStore::Hit>> PromptCacheStore::FetchLongestPrefix(const std::string& model,
                                                                                  std::span<const int32_t> tokens) {
  return impl_->Fetch(model, nullptr, tokens);
}

Result<std::optional<PromptCacheStore::Hit>> PromptCacheStore::FetchLongestPrefix(const ModelFingerprint& model,
                                                                                  std::span<const int32_t> tokens) {
  return impl_->Fetch(model.model_id(), &model, tokens);
}

int64_t PromptCacheStore::entries() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return static_cast<int64_t>(impl_->index.size());
}
int64_t PromptCacheStore::bytes() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->index.bytes();
}
int64_t PromptCacheStore::corrupt_dropped() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->corrupt_dropped;
}
int64_t PromptCacheStore::mismatched_dropped() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->mismatched_dropped;
}
int64_t PromptCacheStore::fingerprint_refused() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->fingerprint_refused;
}
std::string PromptCacheStore::last_refusal() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->last_refusal;
}

}  // namespace kvstore
