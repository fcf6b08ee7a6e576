// Writing an insert to the shared tier: one pipelined EXISTS over every key
// the prompt needs, then the missing chunks and snapshots encoded and
// stored with SET NX in batches of about max_batch_bytes.
#include <algorithm>

#include "libkvstore/shared_tier/namespace_record.h"
#include "libkvstore/shared_tier/shared_tier.h"

namespace kvstore {
namespace {

// A state of the cache: the end of the insert or a checkpoint.
struct CacheAt {
  int64_t tokens = 0;
  std::vector<const Cache*> leaves;
  std::vector<LeafRowSource> rows;  // per leaf
};

Result<CacheAt> StateOf(const SharedNamespace& ns, const PromptCache& cache, int64_t tokens) {
  CacheAt at;
  at.tokens = tokens;
  at.leaves = LeafCaches(cache);
  for (size_t i = 0; i < ns.leaves.size(); ++i) {
    KV_ASSIGN_OR_RETURN(LeafRowSource rows, LeafRowSource::Of(*at.leaves[i], ns.leaves[i], tokens));
    at.rows.push_back(std::move(rows));
  }
  return at;
}

// Values stored with pipelined SET NX calls of about max_batch_bytes, each
// call on a pool worker so that the next batch is encoded meanwhile.
class PutBatch {
 public:
  explicit PutBatch(SharedPromptCache::Impl& impl) : impl_(impl) {}
  Status Add(std::string key, std::string value, bool snapshot) {
    bytes_ += value.size();
    items_.push_back({std::move(key), std::move(value), snapshot});
    return bytes_ >= impl_.options.max_batch_bytes ? Send() : Status::OK();
  }
  // Sends what is waiting once the previous call has returned.
  Status Send() {
    if (items_.empty()) return Status::OK();
    KV_RETURN_IF_ERROR(Wait());
    inflight_ = impl_.pool->Submit<Status>([this, items = std::move(items_)]() { return Put(items); });
    items_.clear();
    bytes_ = 0;
    return Status::OK();
  }
  Status Finish() {
    KV_RETURN_IF_ERROR(Send());
    return Wait();
  }

 private:
  struct Item {
    std::string key, value;
    bool snapshot;
  };
  Status Wait() {
    if (!inflight_.valid()) return Status::OK();
    Status s = inflight_.Get();
    inflight_ = TaskPool::Pending<Status>();
    return s;
  }
  Status Put(const std::vector<Item>& items) {
    std::vector<KvPut> puts;
    for (const Item& item : items) puts.push_back({item.key, item.value});
    Result<std::vector<bool>> written = OnePerKey(impl_.options.backend->PutIfAbsent(puts), puts.size());
    if (!written.ok()) {
      impl_.Add(&SharedPromptCache::Stats::backend_errors);
      return written.status();
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(*written)[i]) {
        impl_.Add(&SharedPromptCache::Stats::chunks_present);
        continue;
      }
      impl_.Add(items[i].snapshot ? &SharedPromptCache::Stats::snapshots_written
                                  : &SharedPromptCache::Stats::chunks_written);
      impl_.Add(&SharedPromptCache::Stats::bytes_written, static_cast<int64_t>(items[i].value.size()));
    }
    return Status::OK();
  }

  SharedPromptCache::Impl& impl_;
  std::vector<Item> items_;
  size_t bytes_ = 0;
  TaskPool::Pending<Status> inflight_;  // waited for when the batch is destroyed
};

ChunkHeader HeaderFor(const SharedNamespace& ns, ChunkKind kind, int64_t i, std::span<const int32_t> tokens,
                      const std::vector<Sha256Digest>& chain, const std::string& writer) {
  const int64_t c = ns.ns.chunk_tokens;
  ChunkHeader h;
  h.kind = kind;
  h.ns_digest = ns.ns.digest.ToHex();
  h.index = i;
  h.chunk_tokens = c;
  h.tokens.assign(tokens.begin() + i * c, tokens.begin() + (i + 1) * c);
  h.chain = chain[i].ToHex();
  h.parent = i > 0 ? chain[i - 1].ToHex() : "";
  h.writer = writer;
  return h;
}

// The value of chunk i, or nullopt when some rows leaf lacks its rows in
// every state (the chunk is then left to a writer that has them).
Result<std::optional<std::string>> EncodeRowsChunk(const SharedNamespace& ns, int64_t i,
                                                   std::span<const int32_t> tokens,
                                                   const std::vector<Sha256Digest>& chain,
                                                   const std::vector<CacheAt>& states, const std::string& key,
                                                   const std::string& writer, const ChunkEncodeOptions& encode) {
  const int64_t c = ns.ns.chunk_tokens;
  ChunkHeader header = HeaderFor(ns, ChunkKind::kRows, i, tokens, chain, writer);
  std::vector<std::shared_ptr<const Cache>> pieces;
  for (size_t l = 0; l < ns.leaves.size(); ++l) {
    const LeafInfo& leaf = ns.leaves[l];
    if (leaf.kind == LeafKind::kSnapshot) continue;
    if (leaf.kind == LeafKind::kRotating && (i + 1) * c > leaf.spec->max_size) continue;
    std::optional<LeafRows> rows;
    for (size_t s = 0; s < states.size() && !rows; ++s) rows = states[s].rows[l].Rows(i * c, (i + 1) * c);
    if (!rows) {
      if (leaf.kind == LeafKind::kRotating) continue;  // a rotating leaf's rows are optional
      return std::optional<std::string>();
    }
    KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> piece, RowsPiece(leaf, *rows));
    pieces.push_back(std::move(piece));
    header.layers.push_back(leaf.path);
  }
  KV_ASSIGN_OR_RETURN(std::string value, EncodeChunk(key, header, pieces, encode));
  return std::optional<std::string>(std::move(value));
}

}  // namespace

Status SharedPromptCache::Impl::Write(const InsertJob& job) {
  const SharedNamespace& ns = *job.ns;
  const int64_t c = ns.ns.chunk_tokens;
  const int64_t n = static_cast<int64_t>(job.tokens.size());
  const int64_t count = n / c;
  if (count == 0) return Status::OK();
  std::vector<CacheAt> states;
  KV_ASSIGN_OR_RETURN(CacheAt end, StateOf(ns, job.cache, n));
  states.push_back(std::move(end));
  for (const PromptCacheCheckpoint& cp : job.checkpoints) {
    KV_ASSIGN_OR_RETURN(CacheAt at, StateOf(ns, cp.cache, cp.tokens));
    states.push_back(std::move(at));
  }
  const std::vector<Sha256Digest> chain = ChainHashes(ns.ns, job.tokens, static_cast<size_t>(count));
  const std::string& prefix = options.key_prefix;

  // Keys: chunks 0..count-1, then the snapshots at boundaries some state has.
  std::vector<std::string> keys;
  for (int64_t i = 0; i < count; ++i) keys.push_back(ChunkKey(prefix, ns.ns, ChunkKind::kRows, chain[i]));
  std::map<int64_t, const CacheAt*> snapshot_at;  // chain index -> state
  if (ns.needs_snapshots) {
    for (const CacheAt& s : states) {
      if (s.tokens % c == 0 && s.tokens / c <= count) snapshot_at.emplace(s.tokens / c - 1, &s);
    }
  }
  for (const auto& [i, s] : snapshot_at) keys.push_back(ChunkKey(prefix, ns.ns, ChunkKind::kSnapshot, chain[i]));
  Result<std::vector<bool>> present = OnePerKey(options.backend->Exists(keys), keys.size());
  if (!present.ok()) {
    Add(&Stats::backend_errors);
    return present.status();
  }

  const ChunkEncodeOptions encode{&ns.ns, options.compression_level};
  PutBatch batch(*this);
  std::vector<int64_t> missing;
  for (int64_t i = 0; i < count; ++i) {
    if ((*present)[i]) {
      Add(&Stats::chunks_present);
    } else {
      missing.push_back(i);
    }
  }
  // Encoded a batch at a time on several threads, stored in chain order.
  const size_t per_batch = static_cast<size_t>(
      std::max<int64_t>(1, static_cast<int64_t>(options.max_batch_bytes) / std::max<int64_t>(1, ns.chunk_bytes)));
  for (size_t first = 0; first < missing.size(); first += per_batch) {
    const size_t n = std::min(per_batch, missing.size() - first);
    std::vector<std::optional<Result<std::string>>> values(n);
    (void)pool->ParallelFor(n, options.codec_threads, [&](size_t j) -> Status {
      Result<std::optional<std::string>> value = EncodeRowsChunk(ns, missing[first + j], job.tokens, chain, states,
                                                                 keys[missing[first + j]], options.writer_id, encode);
      if (!value.ok()) {
        values[j] = Result<std::string>(value.status());
      } else if (*value) {
        values[j] = std::move(**value);
      }
      return Status::OK();
    });
    for (size_t j = 0; j < n; ++j) {
      if (!values[j]) {
        Add(&Stats::chunks_incomplete);
        continue;
      }
      KV_RETURN_IF_ERROR(values[j]->status());
      KV_RETURN_IF_ERROR(batch.Add(keys[missing[first + j]], std::move(*values[j]).value(), false));
    }
  }
  size_t k = static_cast<size_t>(count);
  for (const auto& [i, s] : snapshot_at) {
    const size_t key = k++;
    if ((*present)[key]) {
      Add(&Stats::chunks_present);
      continue;
    }
    ChunkHeader header = HeaderFor(ns, ChunkKind::kSnapshot, i, job.tokens, chain, options.writer_id);
    std::vector<std::shared_ptr<const Cache>> pieces;
    for (size_t l = 0; l < ns.leaves.size(); ++l) {
      if (ns.leaves[l].kind == LeafKind::kRows) continue;
      pieces.push_back(std::shared_ptr<const Cache>(std::shared_ptr<void>(), s->leaves[l]));  // not owned
      header.layers.push_back(ns.leaves[l].path);
    }
    KV_ASSIGN_OR_RETURN(std::string value, EncodeChunk(keys[key], header, pieces, encode));
    KV_RETURN_IF_ERROR(batch.Add(keys[key], std::move(value), true));
  }
  KV_RETURN_IF_ERROR(batch.Finish());
  if (!ns.descriptor_written.load()) Publish(ns);
  return Status::OK();
}

void SharedPromptCache::Impl::Publish(const SharedNamespace& ns) {
  const ChunkSealing sealing = this->sealing();
  const std::string keys[] = {NamespaceKey(options.key_prefix, ns.ns.id),
                              ModelRecordKey(sealing, ns.fingerprint.model_id(), ns.ns.chunk_tokens)};
  Result<std::string> values[] = {EncodeNamespaceRecord(sealing, keys[0], ns.fingerprint, ns.ns.chunk_tokens),
                                  EncodeNamespaceRecord(sealing, keys[1], ns.fingerprint, ns.ns.chunk_tokens)};
  if (!values[0].ok() || !values[1].ok()) return;
  // The first writer of a model id wins: a record is never overwritten.
  const KvPut puts[] = {{keys[0], *values[0]}, {keys[1], *values[1]}};
  Result<std::vector<bool>> written = OnePerKey(options.backend->PutIfAbsent(puts), 2);
  if (!written.ok()) {
    Add(&Stats::backend_errors);
    return;
  }
  if ((*written)[1]) Add(&Stats::models_published);
  ns.descriptor_written = true;
}

}  // namespace kvstore
