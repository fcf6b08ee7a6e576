#include "kvstore/prompt_cache_store.h"

#include <algorithm>
#include <mutex>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/reuse/prefix_hash.h"
#include "libkvstore/reuse/store_format.h"
#include "libkvstore/reuse/store_index.h"

namespace kvstore {

struct PromptCacheStore::Impl {
  Env* env;
  std::string dir;
  PromptCacheStoreOptions options;
  std::unique_ptr<FileLock> lock;

  // Guarded by mu once Open has returned.
  mutable std::mutex mu;
  StoreIndex index;
  int64_t corrupt_dropped = 0;
  int64_t mismatched_dropped = 0;
  std::unique_ptr<WritableFile> manifest;  // append-only log

  std::string Path(const std::string& file) const { return dir + "/" + file; }

  void Add(StoreIndex::Entry entry) {
    const uint64_t hash = KeyHash(entry.key.model, entry.key.tokens);
    index.Insert(std::move(entry), hash);
  }

  void LogLocked(const std::string& line) {
    if (manifest == nullptr) return;
    // The manifest is a hint: a failed append only costs a slower next start.
    if (manifest->Append(std::as_bytes(std::span(line))).ok()) (void)manifest->Sync();
  }

  void AddLocked(StoreIndex::Entry entry) {
    LogLocked(ManifestAddLine(entry.file, entry.bytes, entry.key.model, entry.key.tokens));
    Add(std::move(entry));
  }

  void RemoveLocked(const std::string& file) {
    (void)env->RemoveFile(Path(file));
    LogLocked(ManifestRemoveLine(file));
  }

  void EvictLocked() {
    while (index.bytes() > options.max_bytes && index.size() > 0) {
      const std::string victim = index.LeastRecent()->file;
      RemoveLocked(victim);
      index.Erase(victim);
    }
  }

  // Forgets a bad file unless it has been replaced since it was looked up.
  // `counter` is one of the counters above.
  void Drop(const std::string& file, uint64_t generation, int64_t& counter) {
    std::lock_guard<std::mutex> l(mu);
    if (!index.Erase(file, generation)) return;
    RemoveLocked(file);
    ++counter;
  }

  Status IndexDirectory(StoreOpenReport& report);
};

namespace {

// What a file's header says about it as a store entry.
struct ScannedFile {
  StoreKey key;
  int64_t bytes = 0;
};

// Reads the header of a file (no tensor bytes); it must be one of our
// files with digests and a key, and every layer must be loadable as the
// header describes it (PromptCacheInfo::valid), so an impossible file is
// dropped at Open instead of failing each fetch.
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
  return ScannedFile{std::move(*key), static_cast<int64_t>(info.file_bytes)};
}

bool HoldsKey(const Metadata& metadata, std::string_view model, std::span<const int32_t> tokens) {
  std::optional<StoreKey> held = StoreKeyFromMetadata(metadata);
  return held && held->model == model && std::ranges::equal(held->tokens, tokens);
}

}  // namespace

Status PromptCacheStore::Impl::IndexDirectory(StoreOpenReport& report) {
  KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
  std::unordered_map<std::string, ManifestEntry> listed;
  if (auto m = env->OpenReadable(Path("MANIFEST")); m.ok()) listed = ReadManifest((*m)->data());
  for (const std::string& name : names) {
    if (name.find(".kvtmp-") != std::string::npos) {
      (void)env->RemoveFile(Path(name));  // we own the directory: no live writer
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
        Add({name, m.key, m.bytes});
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
    Add({name, std::move(scanned->key), scanned->bytes});
    ++report.entries;
  }
  // Compact the manifest: one "+" line per entry, least recently used first.
  // (Open runs this before the store is shared: no lock needed.)
  KV_ASSIGN_OR_RETURN(manifest, env->NewWritableFile(Path("MANIFEST")));
  index.ForEach([&](const StoreIndex::Entry& e) {
    LogLocked(ManifestAddLine(e.file, e.bytes, e.key.model, e.key.tokens));
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

Status PromptCacheStore::Put(const std::string& model, std::span<const int32_t> tokens, const PromptCache& cache) {
  if (tokens.empty()) return Status::InvalidArgument("PromptCacheStore: empty token key");
  const std::string file = StoreFileName(model, tokens);
  // The store reads its own files only, so it writes mlx-lm's current
  // layout, which (unlike the 0.31 release's) holds every ArraysCache.
  SavePromptCacheOptions options;
  options.layout = PromptCacheLayout::kMlxLm;
  KV_RETURN_IF_ERROR(
      SavePromptCache(impl_->env, impl_->Path(file), cache, StoreKeyMetadata(model, tokens), options));
  KV_ASSIGN_OR_RETURN(uint64_t size, impl_->env->GetFileSize(impl_->Path(file)));
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->AddLocked({file, StoreKey{model, std::vector<int32_t>(tokens.begin(), tokens.end())},
                    static_cast<int64_t>(size)});
  impl_->EvictLocked();
  return Status::OK();
}

Result<std::optional<PromptCacheStore::Hit>> PromptCacheStore::FetchLongestPrefix(const std::string& model,
                                                                                  std::span<const int32_t> tokens) {
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  // Each failed candidate lowers max_len, so the whole search is O(prompt).
  for (size_t max_len = tokens.size(); max_len >= 1;) {
    std::string file;
    uint64_t generation = 0;
    size_t length = 0;
    {
      std::lock_guard<std::mutex> l(impl_->mu);
      const StoreIndex::Entry* e = impl_->index.FindLongestPrefix(model, tokens, hashes, max_len);
      if (e == nullptr) break;
      file = e->file;
      generation = e->generation;
      length = e->key.tokens.size();
    }
    max_len = length - 1;
    LoadPromptCacheOptions options;
    options.verify = true;
    Result<LoadedPromptCache> loaded = LoadPromptCache(impl_->env, impl_->Path(file), options);
    if (!loaded.ok() && loaded.status().code() == StatusCode::kIOError) continue;  // maybe transient: keep it
    if (!loaded.ok() || !loaded->verified) {
      impl_->Drop(file, generation, impl_->corrupt_dropped);
      continue;
    }
    if (!HoldsKey(loaded->user_metadata, model, tokens.first(length))) {
      impl_->Drop(file, generation, impl_->mismatched_dropped);
      continue;
    }
    return std::optional<Hit>(Hit{std::move(loaded->cache), static_cast<int64_t>(length)});
  }
  return std::optional<Hit>();
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

}  // namespace kvstore
