// PromptCacheStore: indexing the directory after Open, finding a prompt's
// entries by their file names until that is done, and following the
// manifest that every process sharing the directory appends to.
#include <algorithm>
#include <random>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/io/temp_file_name.h"
#include "libkvstore/tiers/prompt_cache_store_impl.h"

namespace kvstore {
namespace {

std::string StagedManifestName(Env* env) { return "MANIFEST.kvtmp-" + std::to_string(env->ProcessId()) + "-new"; }

std::string_view AsText(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The first line of a manifest, newline included ("" when it has none).
std::string FirstLine(std::span<const std::byte> bytes) {
  const std::string_view text = AsText(bytes);
  const size_t nl = text.find('\n');
  return nl == std::string_view::npos ? std::string() : std::string(text.substr(0, nl + 1));
}

// A compacted manifest's first line, unique to it, so that a process
// following the old one notices the new one.
std::string NewManifestHead(Env* env) {
  std::random_device random;
  const uint64_t id = (uint64_t{random()} << 32) | random();
  return "# kvstore manifest " + std::to_string(env->ProcessId()) + "-" + std::to_string(id) + "\n";
}

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
  KV_ASSIGN_OR_RETURN(std::optional<StoreBase> base, StoreBaseFromMetadata(info.user_metadata));
  KV_ASSIGN_OR_RETURN(std::optional<ModelFingerprint> fingerprint, RecordedFingerprint(info.user_metadata));
  return ScannedFile{std::move(*key), static_cast<int64_t>(info.file_bytes), std::move(fingerprint),
                     base ? base->file : ""};
}

Result<std::optional<ModelFingerprint>> RecordedFingerprint(const Metadata& metadata) {
  std::optional<std::string_view> json = FindUserKey(metadata, kStoreFingerprintKey);
  if (!json) return std::optional<ModelFingerprint>();
  KV_ASSIGN_OR_RETURN(ModelFingerprint fp, ModelFingerprint::FromJson(*json));
  return std::optional<ModelFingerprint>(std::move(fp));
}

std::string DigestHex(const std::optional<ModelFingerprint>& fp) { return fp ? fp->digest().ToHex() : ""; }

Status PromptCacheStore::Impl::IndexDirectory() {
  StoreOpenReport report;
  Status status = [&]() -> Status {
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
    RemoveStaleTempFiles(names, report);
    std::unordered_map<std::string, ManifestEntry> listed;
    uint64_t listed_bytes = 0;
    std::string listed_head;
    if (auto m = env->OpenReadable(Path("MANIFEST")); m.ok()) {
      size_t used = 0;
      listed = ReadManifest((*m)->data(), &used);
      listed_bytes = used;
      listed_head = FirstLine((*m)->data());
    }
    for (const std::string& name : names) {
      if (closing) return Status::OK();
      if (name.ends_with(kStoreFileSuffix)) IndexFile(name, listed, report);
    }
    return CompactManifest(listed_bytes, std::move(listed_head));
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
  // A temp file of the store's own pattern is a dead writer's when the
  // process it names is gone; those of live processes (this one's Puts
  // running while the indexer works, other servers sharing the directory)
  // are theirs. Other temp files (a kvtool output being written into the
  // directory) are left alone.
  const int64_t self = env->ProcessId();
  for (const std::string& name : names) {
    if (!IsStoreTempFileName(name)) continue;
    const int64_t pid = TempFileWriterPid(name);
    if (pid == self || (pid > 0 && env->ProcessAlive(pid))) continue;
    if (env->RemoveFile(Path(name)).ok()) ++report.temp_files_removed;
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
      if (AddFoundLocked({name, m.key, m.bytes, m.fingerprint, 0, true, m.base})) ++report.from_manifest;
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
  AddFoundLocked({name, std::move(scanned->key), scanned->bytes, DigestHex(scanned->fingerprint), 0, true,
                  std::move(scanned->base)});
}

Status PromptCacheStore::Impl::StageManifest(const std::string& staged, std::string_view text) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(Path(staged)));
  Status s = file->Append(std::as_bytes(std::span(text)));
  if (s.ok()) s = file->Sync();
  if (s.ok()) s = file->Close();
  if (!s.ok()) (void)env->RemoveFile(Path(staged));
  return s;
}

// A first line naming it, then one "+" line per entry, least recently used
// first, written to a temp file outside the lock and renamed over MANIFEST:
// one sync, however many entries. Lines other processes append between the
// read and the rename are lost to it (their files are indexed from their
// headers by the next Open; docs/design.md).
Status PromptCacheStore::Impl::CompactManifest(uint64_t listed_bytes, std::string listed_head) {
  std::string text = NewManifestHead(env);
  const std::string head = text;
  {
    std::lock_guard<std::mutex> l(mu);
    if (compacting) return Status::OK();  // another thread is at it
    index.ForEach([&](const StoreIndex::Entry& e) {
      text += ManifestAddLine(e.file, e.bytes, e.key.model, e.key.tokens, e.fingerprint, e.base);
    });
    compacting = true;
  }
  const std::string staged = StagedManifestName(env);
  Status s = StageManifest(staged, text);
  std::lock_guard<std::mutex> follow(follow_mu);
  std::lock_guard<std::mutex> l(mu);
  compacting = false;
  if (s.ok()) s = env->RenameFile(Path(staged), Path("MANIFEST"));
  if (!s.ok()) (void)env->RemoveFile(Path(staged));
  // What this process logged meanwhile follows, in either manifest.
  const std::string logged = std::exchange(unlogged, std::string());
  if (!logged.empty()) (void)env->AppendToFile(Path("MANIFEST"), std::as_bytes(std::span(logged)), options.durable);
  if (s.ok()) {
    followed = text.size();
    manifest_head = head;
    compacted_bytes = text.size();
  } else {
    followed = listed_bytes;
    manifest_head = std::move(listed_head);
  }
  return s;
}

void PromptCacheStore::Impl::CompactManifestIfLong() {
  uint64_t bytes = 0;
  std::string head;
  {
    std::lock_guard<std::mutex> follow(follow_mu);
    if (followed < kCompactAtBytes || followed < 4 * compacted_bytes) return;
    bytes = followed;
    head = manifest_head;
  }
  (void)CompactManifest(bytes, std::move(head));  // a hint: on failure, it only stays long
}

void PromptCacheStore::Impl::SaveUnloggedLines() {
  std::lock_guard<std::mutex> l(mu);
  if (unlogged.empty()) return;
  // A hint: when this fails, the next Open reads these files' headers.
  (void)env->AppendToFile(Path("MANIFEST"), std::as_bytes(std::span(unlogged)), options.durable);
  unlogged.clear();
}

void PromptCacheStore::Impl::FollowManifest() {
  std::unique_lock<std::mutex> follow(follow_mu, std::try_to_lock);
  if (!follow.owns_lock()) return;  // another thread is at it
  {
    std::lock_guard<std::mutex> l(mu);
    if (!indexed) return;
  }
  Result<Env::FileStat> stat = env->Stat(Path("MANIFEST"));
  if (!stat.ok() || stat->size == followed) return;
  Result<std::shared_ptr<const ReadableFile>> file = env->OpenReadable(Path("MANIFEST"));
  if (!file.ok()) return;
  const std::span<const std::byte> bytes = (*file)->data();
  if (bytes.size() < followed || FirstLine(bytes) != manifest_head) {  // compacted since: read it all
    followed = 0;
    manifest_head = FirstLine(bytes);
  }
  size_t used = 0;
  std::vector<ManifestChange> changes = ParseManifestChanges(bytes.subspan(followed), &used);
  followed += used;
  std::lock_guard<std::mutex> l(mu);
  for (ManifestChange& change : changes) {
    if (!change.entry) {
      index.Erase(change.file);  // removed by its process (evicted, or dropped as bad)
      continue;
    }
    ManifestEntry& e = *change.entry;
    // A line whose name is not its key's is never indexed (the file it
    // names is checked against the key at every load anyway).
    if (StoreFileName(e.key.model, e.key.tokens) != change.file) continue;
    AddFoundLocked({change.file, std::move(e.key), e.bytes, std::move(e.fingerprint), 0, true, std::move(e.base)});
  }
  EvictLocked();
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
    AddFoundLocked({name, std::move(scanned->key), scanned->bytes, DigestHex(scanned->fingerprint), 0, true,
                  std::move(scanned->base)});
  }
}

}  // namespace kvstore
