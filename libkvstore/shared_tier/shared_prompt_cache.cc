// SharedPromptCache: options, namespaces, the insert queue and counters.
// Fetching is in shared_fetch.cc, writing in shared_insert.cc.
#include <unistd.h>

#include <system_error>

#include "kvstore/zstd_seekable.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/shared_tier/namespace_record.h"
#include "libkvstore/shared_tier/shared_tier.h"

namespace kvstore {
namespace {

std::string DefaultWriterId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return std::string(host[0] != '\0' ? host : "host") + ":" + std::to_string(getpid());
}

// About the bytes of one chunk of a rows or rotating leaf.
int64_t LeafChunkBytes(const LeafInfo& leaf, int64_t tokens) {
  const CacheSpec& s = *leaf.spec;
  const int64_t dims = s.k_head_dim + s.v_head_dim;
  if (leaf.cls->quantized) {
    const int64_t scales = 2 * (dims / s.group_size) * static_cast<int64_t>(DTypeSize(s.dtype));
    return tokens * s.kv_heads * (dims * s.bits / 8 + scales);
  }
  return tokens * s.kv_heads * dims * static_cast<int64_t>(DTypeSize(s.dtype));
}

}  // namespace

std::shared_ptr<const SharedNamespace> SharedPromptCache::Impl::NamespaceFor(const ModelFingerprint& model,
                                                                             const TenantSalt* tenant) {
  std::string id = model.digest().ToHex();
  if (tenant != nullptr) id += "/" + tenant->key_hex(TenantSalt::Tier::kShared);
  std::lock_guard<std::mutex> l(ns_mu);
  auto it = namespaces.find(id);
  if (it != namespaces.end()) return it->second;
  // A cache (one entry per model and tenant): bounded, as tenants are many.
  if (namespaces.size() >= kMaxCachedNamespaces) namespaces.clear();
  auto ns = std::make_shared<SharedNamespace>(model);
  ns->ns = MakeChunkNamespace(model, options.chunk_tokens, sealing(), tenant);
  Result<std::vector<LeafInfo>> leaves = LeavesOf(ns->fingerprint.spec());
  ns->supported = leaves.status();
  if (leaves.ok()) ns->leaves = std::move(leaves).value();
  for (const LeafInfo& leaf : ns->leaves) {
    ns->needs_snapshots = ns->needs_snapshots || leaf.kind != LeafKind::kRows;
    ns->has_snapshot_leaves = ns->has_snapshot_leaves || leaf.kind == LeafKind::kSnapshot;
    if (leaf.kind != LeafKind::kSnapshot) ns->chunk_bytes += LeafChunkBytes(leaf, options.chunk_tokens);
  }
  namespaces.emplace(id, ns);
  return ns;
}

Result<ValueBatch> GetValues(KvBackend& backend, std::span<const std::string> keys) {
  ValueBatch out;
  KV_ASSIGN_OR_RETURN(out.values, OnePerKey(backend.Get(keys, &out.other_type), keys.size()));
  out.other_type.resize(keys.size(), false);
  return out;
}

void SharedPromptCache::Impl::Refused(const std::string& key, const std::string* value, ChunkFault fault,
                                      const Status& why) {
  Add(fault == ChunkFault::kForged       ? &Stats::forged
      : fault == ChunkFault::kMismatched ? &Stats::mismatched
                                         : &Stats::corrupt);
  {
    std::lock_guard<std::mutex> l(stats_mu);
    stats.last_refusal = std::string(why.message());
  }
  Result<bool> deleted =
      value != nullptr ? options.backend->DeleteIfEquals(key, *value) : options.backend->DeleteIfOtherType(key);
  if (!deleted.ok()) {
    Add(&Stats::backend_errors);
  } else {
    Add(*deleted ? &Stats::deleted : &Stats::replaced_before_delete);
  }
}

void SharedPromptCache::Impl::RefusedOtherType(const std::string& key) {
  Add(&Stats::values_read);
  Refused(key, nullptr, ChunkFault::kCorrupt,
          Status::Corruption("shared tier: " + key + ": holds another type than a byte string"));
}

SharedPromptCache::SharedPromptCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SharedPromptCache::~SharedPromptCache() {
  if (impl_->inserts) impl_->Add(&Stats::inserts_dropped, static_cast<int64_t>(impl_->inserts->Close()));
}

Status SharedPromptCache::CheckOptions(const SharedPromptCacheOptions& options) {
  if (options.chunk_tokens < 1) return Status::InvalidArgument("shared tier: chunk_tokens must be >= 1");
  if (options.writer_threads < 1) return Status::InvalidArgument("shared tier: writer_threads must be >= 1");
  if (options.key_prefix.empty()) return Status::InvalidArgument("shared tier: empty key prefix");
  if (options.secret && options.secret->empty()) {
    return Status::InvalidArgument("shared tier: empty secret (give none for no seal)");
  }
  if (options.compression_level) KV_RETURN_IF_ERROR(CheckZstdLevel(*options.compression_level).WithPrefix("shared tier"));
  return Status::OK();
}

Result<std::unique_ptr<SharedPromptCache>> SharedPromptCache::Open(SharedPromptCacheOptions options) {
  if (options.backend == nullptr) return Status::InvalidArgument("shared tier: no backend");
  KV_RETURN_IF_ERROR(CheckOptions(options));
  if (options.writer_id.empty()) options.writer_id = DefaultWriterId();
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  if (impl->options.async_insert) {
    if (impl->pool->StartWorkers(1) == 0) {
      return Status::ResourceExhausted("shared tier: cannot start a writer thread");
    }
    impl->inserts.emplace(*impl->pool, TaskQueue::Options{.capacity = impl->options.insert_queue_capacity,
                                                          .concurrency = impl->options.writer_threads});
  }
  return std::unique_ptr<SharedPromptCache>(new SharedPromptCache(std::move(impl)));
}

Result<std::optional<SharedPromptCache::Hit>> SharedPromptCache::Fetch(const ModelFingerprint& model,
                                                                       std::span<const int32_t> tokens,
                                                                       int64_t min_tokens, const TenantSalt* tenant) {
  impl_->Add(&Stats::fetches);
  std::shared_ptr<const SharedNamespace> ns = impl_->NamespaceFor(model, tenant);
  if (!ns->supported.ok()) {
    impl_->Add(&Stats::unsupported);
    return std::optional<Hit>();
  }
  return impl_->Fetch(*ns, tokens, min_tokens);
}

Status SharedPromptCache::Insert(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                 const PromptCache& cache, std::span<const PromptCacheCheckpoint> checkpoints,
                                 const TenantSalt* tenant) {
  impl_->Add(&Stats::inserts);
  std::shared_ptr<const SharedNamespace> ns = impl_->NamespaceFor(model, tenant);
  if (!ns->supported.ok()) {
    impl_->Add(&Stats::unsupported);
    return Status::OK();
  }
  KV_RETURN_IF_ERROR(model.Check(cache));
  // Chunks are cut at token positions: a layer holding another count than
  // the key would be stored as someone else's prefix.
  KV_RETURN_IF_ERROR(CheckLeafTokens(cache, static_cast<int64_t>(tokens.size())).WithPrefix("shared tier"));
  for (const PromptCacheCheckpoint& cp : checkpoints) {
    if (cp.tokens < 1 || cp.tokens > static_cast<int64_t>(tokens.size())) {
      return Status::InvalidArgument("shared tier: a checkpoint at " + std::to_string(cp.tokens) +
                                     " tokens is outside the prompt");
    }
    const std::string where = "checkpoint at " + std::to_string(cp.tokens) + " tokens";
    KV_RETURN_IF_ERROR(model.Check(cp.cache).WithPrefix(where));
    KV_RETURN_IF_ERROR(CheckLeafTokens(cp.cache, cp.tokens).WithPrefix("shared tier: " + where));
  }
  auto copy = [](const PromptCache& c) {
    PromptCache out;
    for (const auto& layer : c) out.push_back(std::shared_ptr<Cache>(layer->Copy()));
    return out;
  };
  InsertJob job{ns, std::vector<int32_t>(tokens.begin(), tokens.end()), copy(cache), {}};
  for (const PromptCacheCheckpoint& cp : checkpoints) job.checkpoints.push_back({cp.tokens, copy(cp.cache)});
  if (!impl_->options.async_insert) {
    Status s = impl_->Write(job);
    if (!s.ok()) impl_->Add(&Stats::insert_errors);
    return s;
  }
  Impl* impl = impl_.get();
  if (!impl->inserts->TryPush([impl, job = std::move(job)] {
        if (!impl->Write(job).ok()) impl->Add(&Stats::insert_errors);
      })) {
    impl->Add(&Stats::inserts_dropped);
  }
  return Status::OK();
}

void SharedPromptCache::Flush() {
  if (impl_->inserts) impl_->inserts->Flush();
}

std::optional<ModelFingerprint> SharedPromptCache::PublishedModel(std::string_view model_id) {
  const ChunkSealing sealing = impl_->sealing();
  const std::string key = ModelRecordKey(sealing, model_id, impl_->options.chunk_tokens);
  Result<ValueBatch> got = GetValues(*impl_->options.backend, std::span<const std::string>(&key, 1));
  if (!got.ok()) {
    impl_->Add(&Stats::backend_errors);
    return std::nullopt;
  }
  if (got->other_type[0]) {
    impl_->RefusedOtherType(key);
    return std::nullopt;
  }
  if (!got->values[0]) return std::nullopt;
  const std::string& value = *got->values[0];
  impl_->Add(&Stats::values_read);
  bool forged = false;
  Result<NamespaceRecord> record = DecodeNamespaceRecord(sealing, key, value, &forged);
  if (record.ok() && (record->chunk_tokens != impl_->options.chunk_tokens ||
                      record->fingerprint.model_id() != model_id)) {
    record = Status::Corruption("shared tier: " + key + ": a model record for another model or chunk size");
  }
  if (!record.ok()) {
    impl_->Refused(key, &value, forged ? ChunkFault::kForged : ChunkFault::kCorrupt, record.status());
    return std::nullopt;
  }
  impl_->Add(&Stats::models_found);
  return std::move(record->fingerprint);
}

SharedPromptCache::Stats SharedPromptCache::stats() const {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  return impl_->stats;
}

int64_t SharedPromptCache::chunk_tokens() const { return impl_->options.chunk_tokens; }
const std::string& SharedPromptCache::writer_id() const { return impl_->options.writer_id; }

std::string SharedPromptCache::Describe() const {
  const SharedPromptCacheOptions& o = impl_->options;
  return "shared tier on " + o.backend->Describe() + ", " + std::to_string(o.chunk_tokens) + "-token chunks" +
         (o.secret ? ", sealed" : "") +
         (o.compression_level ? ", zstd " + std::to_string(*o.compression_level) : "");
}

}  // namespace kvstore
