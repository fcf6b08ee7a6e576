// PromptCacheStore: opening a directory (indexed by prompt_cache_store_index.cc), saving entries, counters.
#include "kvstore/prompt_cache_store.h"

#include <mutex>

#include "kvstore/model_fingerprint.h"
#include "kvstore/prompt_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/user_path.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/granule_index.h"
#include "libkvstore/tiers/prompt_cache_store_impl.h"

namespace kvstore {

PromptCacheStore::PromptCacheStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PromptCacheStore::~PromptCacheStore() {
  impl_->closing = true;
  impl_->indexing = TaskPool::Pending<Status>();  // waits for the indexer to stop
  impl_->SaveUnloggedLines();
}

Result<std::unique_ptr<PromptCacheStore>> PromptCacheStore::Open(Env* env, const std::string& dir_as_given,
                                                                 const PromptCacheStoreOptions& options,
                                                                 StoreOpenReport* report) {
  Result<std::string> expanded = ExpandUserPath(dir_as_given);
  if (!expanded.ok()) return expanded.status().WithPrefix("prompt-cache store");
  const std::string& dir = *expanded;
  KV_RETURN_IF_ERROR(env->CreateDir(dir));
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->dir = dir;
  impl->options = options;
  // Indexed on a worker of the library's pool (its workers start lazily:
  // ask for one), so Open returns at once.
  if (report == nullptr && TaskPool::Shared().StartWorkers(1) >= 1) {
    Impl* p = impl.get();
    impl->indexing = TaskPool::Shared().Submit<Status>([p] { return p->IndexDirectory(); });
  } else {
    // No thread to index on, or the caller wants the report: index now.
    KV_RETURN_IF_ERROR(impl->IndexDirectory());
    if (report != nullptr) *report = impl->open_report;
  }
  return std::unique_ptr<PromptCacheStore>(new PromptCacheStore(std::move(impl)));
}

Result<StoreOpenReport> PromptCacheStore::WaitUntilIndexed() const {
  std::unique_lock<std::mutex> l(impl_->mu);
  impl_->indexed_cv.wait(l, [&] { return impl_->indexed; });
  if (!impl_->index_status.ok()) return impl_->index_status;
  return impl_->open_report;
}

Status PromptCacheStore::Impl::Put(const std::string& model, const std::optional<ModelFingerprint>& fingerprint,
                                   std::span<const int32_t> tokens, const PromptCache& cache, bool share) {
  if (tokens.empty()) return Status::InvalidArgument("PromptCacheStore: empty token key");
  KV_RETURN_IF_ERROR(CheckLeafTokens(cache, static_cast<int64_t>(tokens.size())).WithPrefix("PromptCacheStore"));
  FollowManifest();  // the budget counts what the other processes wrote
  const std::string file = StoreFileName(model, tokens);
  // A cache every layer of which can be trimmed serves each of its prefixes
  // (trimmed, as a fetch does with a longer entry): the stored prefixes of
  // the same model configuration go, as mlx-lm's LRUPromptCache removes
  // them from memory, so a prompt and then prompt + completion, or the
  // turns of one conversation, cost one file, not one per step. A prefix
  // that is the base of a delta entry stays (the delta entry needs it).
  const bool supersedes = CanTrimPromptCache(cache);
  // Sharing a prefix with an entry: only the rows after it are written.
  const bool may_share = fingerprint && share && options.share_prefixes;
  const std::vector<uint64_t> hashes =
      supersedes || may_share ? PrefixHashes(model, tokens) : std::vector<uint64_t>();
  const std::optional<DeltaPlan> delta =
      may_share ? PlanDelta(model, *fingerprint, tokens, cache, hashes, supersedes) : std::nullopt;
  Metadata metadata = StoreKeyMetadata(model, tokens);
  if (fingerprint) metadata.emplace_back(std::string(kStoreFingerprintKey), fingerprint->json());
  if (delta) metadata.emplace_back(std::string(kStoreBaseKey), StoreBaseText(delta->base));
  // The store reads its own files only, so it writes mlx-lm's current
  // layout, which (unlike the 0.31 release's) holds every ArraysCache.
  SavePromptCacheOptions save;
  save.layout = PromptCacheLayout::kMlxLm;
  save.digest = options.digest;
  save.durability = options.durable ? Durability::kAlways : Durability::kNone;
  // Saved under a temp name (Open removes leftovers), then renamed into
  // place under the lock together with the index update: a Drop of the
  // entry this replaces (a fetch that found the old file corrupt) or an
  // eviction can then never remove the new file before it is indexed.
  const std::string staged =
      file + ".kvtmp-" + std::to_string(env->ProcessId()) + "-put" + std::to_string(next_staged.fetch_add(1));
  KV_RETURN_IF_ERROR(SavePromptCache(env, Path(staged), delta ? delta->rows : cache, metadata, save));
  Result<uint64_t> size = env->GetFileSize(Path(staged));
  if (!size.ok()) {
    (void)env->RemoveFile(Path(staged));
    return size.status();
  }
  {
    std::unique_lock<std::mutex> l(mu);
    if (delta && !index.Contains(delta->base.file)) {
      // The base went while this was written (evicted, or superseded by
      // another Put): written whole instead.
      l.unlock();
      (void)env->RemoveFile(Path(staged));
      return Put(model, fingerprint, tokens, cache, false);
    }
    if (Status renamed = env->RenameFile(Path(staged), Path(file)); !renamed.ok()) {
      (void)env->RemoveFile(Path(staged));
      return renamed;
    }
    AddLocked({file, StoreKey{model, std::vector<int32_t>(tokens.begin(), tokens.end())},
               static_cast<int64_t>(*size), DigestHex(fingerprint), 0, supersedes,
               delta ? delta->base.file : std::string()});
    if (delta) index.Touch(delta->base.file);  // in use again
    if (supersedes) RemovePrefixesLocked(model, DigestHex(fingerprint), tokens, hashes);
    EvictLocked();
  }
  CompactManifestIfLong();
  // The rename's durability; the entry is indexed either way.
  return options.durable ? env->SyncDir(dir) : Status::OK();
}

void PromptCacheStore::Impl::RemovePrefixesLocked(const std::string& model, const std::string& fingerprint,
                                                  std::span<const int32_t> tokens,
                                                  std::span<const uint64_t> hashes) {
  // A fetch finds a longer entry through the hashes of its first k*G
  // tokens (GranuleIndex): a prefix shorter than one granule would no
  // longer be found, so it stays.
  constexpr size_t kShortest = GranuleIndex<int>::kGranule;
  for (size_t max_len = tokens.size() - 1; max_len >= kShortest;) {
    const StoreIndex::Entry* e = index.FindLongestPrefix(model, tokens, hashes, max_len);
    if (e == nullptr || e->key.tokens.size() < kShortest) return;
    max_len = e->key.tokens.size() - 1;
    // Another configuration's entry (another --kv-bits, say) is not served
    // by this one: kept.
    if (e->fingerprint != fingerprint) continue;
    if (index.HasDependents(e->file)) continue;  // a base: its delta entries need it
    const std::string victim = e->file;
    RemoveLocked(victim);
    index.Erase(victim);
    ++prefixes_superseded;
  }
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

Status PromptCacheStore::Put(const ModelFingerprint& model, std::span<const int32_t> tokens, const PromptCache& cache,
                             const TenantSalt* tenant) {
  KV_RETURN_IF_ERROR(model.Check(cache));
  return impl_->Put(SaltedStoreModelKey(model.model_id(), tenant), model, tokens, cache);
}

Result<std::optional<PromptCacheStore::Hit>> PromptCacheStore::FetchLongestPrefix(const std::string& model,
                                                                                  std::span<const int32_t> tokens) {
  return impl_->Fetch(model, nullptr, tokens, 0);
}

Result<std::optional<PromptCacheStore::Hit>> PromptCacheStore::FetchLongestPrefix(const ModelFingerprint& model,
                                                                                  std::span<const int32_t> tokens,
                                                                                  const TenantSalt* tenant,
                                                                                  int64_t min_tokens) {
  return impl_->Fetch(SaltedStoreModelKey(model.model_id(), tenant), &model, tokens, min_tokens);
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
int64_t PromptCacheStore::prefixes_superseded() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->prefixes_superseded;
}
std::string PromptCacheStore::last_refusal() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->last_refusal;
}
std::vector<std::string> PromptCacheStore::TakeDropped() {
  std::lock_guard<std::mutex> l(impl_->mu);
  std::vector<std::string> out = std::move(impl_->dropped_notes);
  impl_->dropped_notes.clear();
  if (impl_->dropped_unnoted > 0) {
    out.push_back("and " + std::to_string(impl_->dropped_unnoted) + " more");
    impl_->dropped_unnoted = 0;
  }
  return out;
}

}  // namespace kvstore
