// Fetching from the shared tier: one pipelined EXISTS over the prompt's
// chain (and snapshots), GETs of the chunks that can matter in batches,
// every value checked, then the longest boundary at which every layer can
// be rebuilt.
#include <algorithm>

#include "libkvstore/shared_tier/shared_tier.h"

namespace kvstore {
namespace {

// Whether each rotating leaf has rows in chunks 0..k-1, for every k.
struct RowCoverage {
  // covered[l][k]: leaf l has rows in chunks 0..k-1.
  std::vector<std::vector<bool>> covered;
};

RowCoverage Coverage(const SharedNamespace& ns, const std::vector<DecodedChunk>& chunks) {
  RowCoverage out;
  for (const LeafInfo& leaf : ns.leaves) {
    std::vector<bool> c(chunks.size() + 1, true);
    for (size_t i = 0; i < chunks.size(); ++i) c[i + 1] = c[i] && chunks[i].rows.count(leaf.path) > 0;
    out.covered.push_back(std::move(c));
  }
  return out;
}

}  // namespace

Result<std::optional<SharedPromptCache::Hit>> SharedPromptCache::Impl::Fetch(const SharedNamespace& ns,
                                                                             std::span<const int32_t> tokens,
                                                                             int64_t min_tokens) {
  const int64_t c = ns.ns.chunk_tokens;
  const int64_t count = static_cast<int64_t>(tokens.size()) / c;
  const int64_t floor_k = std::max<int64_t>(0, min_tokens) / c;  // boundaries <= this do not beat min_tokens
  if (count <= floor_k) return std::optional<Hit>();
  const std::vector<Sha256Digest> chain = ChainHashes(ns.ns, tokens, static_cast<size_t>(count));
  const std::string& prefix = options.key_prefix;
  std::vector<std::string> keys, snapshot_keys;
  for (int64_t i = 0; i < count; ++i) keys.push_back(ChunkKey(prefix, ns.ns, ChunkKind::kRows, chain[i]));
  std::vector<std::string> probe = keys;
  if (ns.needs_snapshots) {
    for (int64_t i = 0; i < count; ++i) {
      snapshot_keys.push_back(ChunkKey(prefix, ns.ns, ChunkKind::kSnapshot, chain[i]));
      probe.push_back(snapshot_keys.back());
    }
  }
  Result<std::vector<bool>> present = OnePerKey(options.backend->Exists(probe), probe.size());
  if (!present.ok()) {
    Add(&Stats::backend_errors);
    return std::optional<Hit>();
  }
  int64_t chained = 0;  // leading chunks present
  while (chained < count && (*present)[chained]) ++chained;
  std::vector<bool> snapshot(count + 1, false);  // snapshot[k]: a snapshot at k*C exists
  for (int64_t k = 1; ns.needs_snapshots && k <= count; ++k) snapshot[k] = (*present)[count + k - 1];
  int64_t upper = chained;
  if (ns.has_snapshot_leaves) {
    while (upper > floor_k && !snapshot[upper]) --upper;
  }
  if (upper <= floor_k) return std::optional<Hit>();

  // Read and check chunks 0..upper-1; the first missing or bad one ends the chain.
  std::vector<DecodedChunk> chunks;
  const size_t per_call = static_cast<size_t>(
      std::max<int64_t>(1, static_cast<int64_t>(options.max_batch_bytes) / std::max<int64_t>(1, ns.chunk_bytes)));
  // Each batch is read on a pool worker while the previous one is decoded.
  using Values = Result<ValueBatch>;
  auto read = [&](int64_t first) {
    const int64_t last = std::min<int64_t>(upper, first + static_cast<int64_t>(per_call));
    return pool->Submit<Values>([this, &keys, first, last]() -> Values {
      return GetValues(*options.backend, std::span<const std::string>(keys).subspan(first, last - first));
    });
  };
  TaskPool::Pending<Values> next = read(0);
  for (int64_t first = 0; first < upper && static_cast<int64_t>(chunks.size()) == first;) {
    const int64_t last = std::min<int64_t>(upper, first + static_cast<int64_t>(per_call));
    Values values = next.Get();
    if (last < upper) next = read(last);
    if (!values.ok()) {
      Add(&Stats::backend_errors);
      break;
    }
    // Decode the batch on several threads, then take it in chain order.
    std::vector<std::optional<Result<DecodedChunk>>> decoded(static_cast<size_t>(last - first));
    std::vector<ChunkFault> faults(decoded.size(), ChunkFault::kCorrupt);
    std::vector<std::shared_ptr<std::string>> bytes(decoded.size());  // kept for a conditional delete
    (void)pool->ParallelFor(decoded.size(), options.codec_threads, [&](size_t j) -> Status {
      const int64_t i = first + static_cast<int64_t>(j);
      std::optional<std::string>& v = values->values[j];
      if (!v) return Status::OK();
      Add(&Stats::values_read);
      Add(&Stats::bytes_read, static_cast<int64_t>(v->size()));
      ChunkRequest request{keys[i], ChunkKind::kRows, &ns.ns, i, tokens.subspan(i * c, c), &chain[i],
                           i > 0 ? &chain[i - 1] : nullptr, &ns.leaves};
      bytes[j] = std::make_shared<std::string>(std::move(*v));
      decoded[j] = DecodeChunk(bytes[j], request, &faults[j]);
      return Status::OK();
    });
    for (size_t j = 0; j < decoded.size(); ++j) {
      if (values->other_type[j]) {
        RefusedOtherType(keys[first + static_cast<int64_t>(j)]);
        break;
      }
      if (!decoded[j]) {
        Add(&Stats::vanished);
        break;
      }
      if (!decoded[j]->ok()) {
        Refused(keys[first + static_cast<int64_t>(j)], bytes[j].get(), faults[j], decoded[j]->status());
        break;
      }
      chunks.push_back(std::move(*decoded[j]).value());
    }
    first = last;
  }

  // The longest boundary at which every leaf is rebuilt from rows or a snapshot.
  const RowCoverage coverage = Coverage(ns, chunks);
  for (int64_t k = static_cast<int64_t>(chunks.size()); k > floor_k; --k) {
    bool need_snapshot = false;
    for (size_t l = 0; l < ns.leaves.size(); ++l) {
      const LeafInfo& leaf = ns.leaves[l];
      const bool rows = leaf.kind == LeafKind::kRows ||
                        (leaf.kind == LeafKind::kRotating && k * c <= leaf.spec->max_size && coverage.covered[l][k]);
      need_snapshot = need_snapshot || !rows;
    }
    RebuildInputs inputs;
    inputs.tokens = k * c;
    if (need_snapshot) {
      if (!snapshot[k]) continue;
      const std::string keys_k[] = {snapshot_keys[k - 1]};
      Result<ValueBatch> value = GetValues(*options.backend, keys_k);
      if (!value.ok()) {
        Add(&Stats::backend_errors);
        return std::optional<Hit>();
      }
      if (value->other_type[0]) {
        RefusedOtherType(keys_k[0]);
        continue;
      }
      std::optional<std::string>& v = value->values[0];
      if (!v) {
        Add(&Stats::vanished);
        continue;
      }
      Add(&Stats::values_read);
      Add(&Stats::bytes_read, static_cast<int64_t>(v->size()));
      ChunkRequest request{keys_k[0], ChunkKind::kSnapshot, &ns.ns, k - 1, tokens.subspan((k - 1) * c, c),
                           &chain[k - 1], k > 1 ? &chain[k - 2] : nullptr, &ns.leaves};
      ChunkFault fault = ChunkFault::kCorrupt;
      auto snapshot_bytes = std::make_shared<std::string>(std::move(*v));
      Result<DecodedChunk> decoded = DecodeChunk(snapshot_bytes, request, &fault);
      if (!decoded.ok()) {
        Refused(keys_k[0], snapshot_bytes.get(), fault, decoded.status());
        continue;
      }
      inputs.snapshots = std::move(decoded->snapshots);
    }
    int64_t foreign = 0;
    for (int64_t i = 0; i < k; ++i) {
      for (auto& [leaf_path, rows] : chunks[i].rows) {
        const std::string& path = leaf_path;
        const LeafInfo& leaf = *std::find_if(ns.leaves.begin(), ns.leaves.end(),
                                             [&](const LeafInfo& x) { return x.path == path; });
        // A rotating leaf is rebuilt from rows only when it has them all.
        if (leaf.kind == LeafKind::kRotating && inputs.snapshots.count(path) > 0) continue;
        inputs.rows[path].push_back(rows);
      }
      if (chunks[i].header.writer != options.writer_id) foreign += c;
    }
    for (auto it = inputs.rows.begin(); it != inputs.rows.end();) {
      it = static_cast<int64_t>(it->second.size()) == k ? std::next(it) : inputs.rows.erase(it);
    }
    Result<PromptCache> cache = RebuildPromptCache(ns.fingerprint.spec(), inputs);
    if (!cache.ok()) {
      // The checks above should make every leaf whole; if values that
      // passed them still do not, this boundary is a miss, not an error.
      Add(&Stats::rebuild_failures);
      std::lock_guard<std::mutex> l(stats_mu);
      stats.last_refusal = std::string(cache.status().message());
      continue;
    }
    Add(&Stats::hits);
    Add(&Stats::tokens_served, k * c);
    Add(&Stats::foreign_tokens_served, foreign);
    return std::optional<Hit>(Hit{std::move(cache).value(), k * c, foreign});
  }
  return std::optional<Hit>();
}

}  // namespace kvstore
