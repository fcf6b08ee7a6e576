// PromptCacheStore: indexing the directory after Open, and finding a
// prompt's entries by their file names until that is done.
#include <algorithm>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/tiers/prompt_cache_store_impl.h"

namespace kvstore {
namespace {

std::optional<std::string_view> FindUserKey(const Metadata& metadata, std::string_view key) {
  for (const auto& [k, v] : metadata) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::string StagedManifestName(Env* env) { return "MANIFEST.kvtmp-" + std::to_string(env->ProcessId()) + "-new"; }

}  // namespace

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

Status PromptCacheStore::Impl::IndexDirectory() {
  StoreOpenReport report;
  Status status = [&]() -> Status {
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
    RemoveStaleTempFiles(names, report);
    std::unordered_map<std::string, ManifestEntry> listed;
    if (auto m = env->OpenReadable(Path("MANIFEST")); m.ok()) listed = ReadManifest((*m)->data());
    for (const std::string& name : names) {
      if (closing) return Status::OK();
      if (name.ends_with(kStoreFileSuffix)) IndexFile(name, listed, report);
    }
    return CompactManifest();
  }();
  std::lock_guard<std::mutex> l(mu);
  indexed = true;
  if (!closing) EvictLocked();
  report.entries = static_cast<int64_t>(index.size());
  open_report = std::move(report);
  index_status = status;
  indexed_cv.notify_all();
  return status;
}

void PromptCacheStore::Impl::RemoveStaleTempFiles(const std::vector<std::string>& names,
                                                  StoreOpenReport& report) {
  // One process owns the directory, so a temp file of the store's own
  // pattern is a dead writer's, except those of this process's Puts running
  // while the indexer works. Other temp files (a kvtool output being written
  // into the directory) are left alone.
  const std::string own = ".kvtmp-" + std::to_string(env->ProcessId()) + "-";
  for (const std::string& name : names) {
    if (IsStoreTempFileName(name) && name.find(own) == std::string::npos) {
      if (env->RemoveFile(Path(name)).ok()) ++report.temp_files_removed;
    }
  }
}

bool PromptCacheStore::Impl::AddFoundLocked(StoreIndex::Entry entry) {
  if (index.Contains(entry.file)) return false;
  Add(std::move(entry));
  return true;
}

void PromptCacheStore::Impl::IndexFile(const std::string& name,
                                       const std::unordered_map<std::string, ManifestEntry>& listed,
                                       StoreOpenReport& report) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (index.Contains(name)) return;  // a Put or a fetch was first
  }
  // A file removed since the listing (a fetch dropped it, or evicted it) is gone: nothing to do.
  Result<uint64_t> size = env->GetFileSize(Path(name));
  if (!size.ok() && size.status().code() == StatusCode::kNotFound) return;
  if (auto it = listed.find(name); it != listed.end()) {
    const ManifestEntry& m = it->second;
    if (size.ok() && static_cast<int64_t>(*size) == m.bytes && StoreFileName(m.key.model, m.key.tokens) == name) {
      std::lock_guard<std::mutex> l(mu);
      if (AddFoundLocked({name, m.key, m.bytes, m.fingerprint})) ++report.from_manifest;
      return;
    }
    ++report.manifest_ignored;
  }
  Result<ScannedFile> scanned = ScanFile(env, Path(name));
  if (!scanned.ok() && scanned.status().code() == StatusCode::kNotFound) return;
  if (!scanned.ok() && scanned.status().code() == StatusCode::kIOError) {
    report.dropped.push_back(name + ": " + scanned.status().ToString() + " (left in place)");
    return;  // maybe transient: a later Open may index it
  }
  std::string why;
  if (!scanned.ok()) {
    why = scanned.status().ToString();
  } else if (const std::string expected = StoreFileName(scanned->key.model, scanned->key.tokens); expected != name) {
    why = "holds the key of " + expected;
  }
  std::lock_guard<std::mutex> l(mu);
  if (!why.empty()) {
    if (index.Contains(name)) return;  // replaced by a Put since it was read
    report.dropped.push_back(name + ": " + why);
    NoteDroppedLocked(report.dropped.back());
    (void)env->RemoveFile(Path(name));
    if (scanned.ok()) ++mismatched_dropped;
    return;
  }
  AddFoundLocked({name, std::move(scanned->key), scanned->bytes, DigestHex(scanned->fingerprint)});
}

Result<std::unique_ptr<WritableFile>> PromptCacheStore::Impl::StageManifest(const std::string& staged,
                                                                            std::string_view text) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(Path(staged)));
  Status s = file->Append(std::as_bytes(std::span(text)));
  if (s.ok()) s = file->Sync();
  if (!s.ok()) {
    (void)env->RemoveFile(Path(staged));
    return s;
  }
  return file;
}

// One "+" line per entry, least recently used first, written to a temp file
// outside the lock and renamed over MANIFEST: one sync, however many entries.
Status PromptCacheStore::Impl::CompactManifest() {
  std::string text;
  {
    std::lock_guard<std::mutex> l(mu);
    index.ForEach([&](const StoreIndex::Entry& e) {
      text += ManifestAddLine(e.file, e.bytes, e.key.model, e.key.tokens, e.fingerprint);
    });
    unlogged.clear();  // in the index, so in `text`
  }
  const std::string staged = StagedManifestName(env);
  Result<std::unique_ptr<WritableFile>> file = StageManifest(staged, text);
  std::lock_guard<std::mutex> l(mu);
  Status s = file.status();
  if (s.ok() && !unlogged.empty()) s = (*file)->Append(std::as_bytes(std::span(unlogged)));
  if (s.ok() && !unlogged.empty()) s = (*file)->Sync();
  if (s.ok()) s = env->RenameFile(Path(staged), Path("MANIFEST"));
  if (!s.ok()) {
    if (file.ok()) (void)env->RemoveFile(Path(staged));
    unlogged = text + unlogged;  // for SaveUnloggedLines
    return s;
  }
  manifest = std::move(file).value();
  unlogged.clear();
  return Status::OK();
}

void PromptCacheStore::Impl::SaveUnloggedLines() {
  if (manifest != nullptr || unlogged.empty()) return;
  std::string text;
  if (auto old = env->OpenReadable(Path("MANIFEST")); old.ok()) {
    const std::span<const std::byte> bytes = (*old)->data();
    text.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    text.erase(text.rfind('\n') + 1);  // a torn last line
  }
  text += unlogged;
  const std::string staged = StagedManifestName(env);
  // A hint: when this fails, the next Open reads these files' headers.
  if (StageManifest(staged, text).ok() && !env->RenameFile(Path(staged), Path("MANIFEST")).ok()) {
    (void)env->RemoveFile(Path(staged));
  }
}

void PromptCacheStore::Impl::IndexPrefixesByName(const std::string& model, std::span<const int32_t> tokens) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (indexed) return;
  }
  const std::vector<std::string> names = StoreFileNamesOfPrefixes(model, tokens);
  for (size_t n = names.size(); n >= 1; --n) {
    const std::string& name = names[n - 1];
    {
      std::lock_guard<std::mutex> l(mu);
      if (indexed) return;
      if (index.Contains(name)) continue;
    }
    if (!env->FileExists(Path(name))) continue;
    // A file that does not hold this key, or cannot be read, is left to the
    // indexer, which drops and counts it as it does any other.
    Result<ScannedFile> scanned = ScanFile(env, Path(name));
    if (!scanned.ok() || scanned->key.model != model || !std::ranges::equal(scanned->key.tokens, tokens.first(n))) {
      continue;
    }
    std::lock_guard<std::mutex> l(mu);
    AddFoundLocked({name, std::move(scanned->key), scanned->bytes, DigestHex(scanned->fingerprint)});
  }
}

}  // namespace kvstore
