// PromptCacheStore's delta entries: entries that share a prefix share its
// bytes. A Put whose prompt shares at least kMinDeltaBase tokens with a
// whole entry writes only the rows after them and names that entry as its
// base; a load joins the base's rows with its own. Only models whose every
// leaf is cut by tokens (KVCache, QuantizedKVCache, ChunkedKVCache: the
// rows leaves of docs/format.md §8.3) have deltas: the others' state at a
// token count is not a slice of a longer one.
#include <algorithm>
#include <utility>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/shared_tier/chunk_layout.h"
#include "libkvstore/tiers/prompt_cache_store_impl.h"

namespace kvstore {
namespace {

int64_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<int64_t>(std::ranges::mismatch(a.first(n), b.first(n)).in1 - a.begin());
}

// The leaves of `fingerprint`'s model when each is a rows leaf.
std::optional<std::vector<LeafInfo>> RowsLeaves(const ModelFingerprint& fingerprint) {
  Result<std::vector<LeafInfo>> leaves = LeavesOf(fingerprint.spec());
  if (!leaves.ok() || leaves->empty()) return std::nullopt;
  for (const LeafInfo& leaf : *leaves) {
    if (leaf.kind != LeafKind::kRows) return std::nullopt;
  }
  return std::move(*leaves);
}

}  // namespace

std::optional<PromptCacheStore::Impl::DeltaPlan> PromptCacheStore::Impl::PlanDelta(
    const std::string& model, const ModelFingerprint& fingerprint, std::span<const int32_t> tokens,
    const PromptCache& cache, std::span<const uint64_t> hashes, bool supersedes) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  std::optional<std::vector<LeafInfo>> leaves = RowsLeaves(fingerprint);
  if (!leaves) return std::nullopt;
  const std::string digest = fingerprint.digest().ToHex();
  const std::string self = StoreFileName(model, tokens);  // the entry this Put replaces is no base
  // The whole entry sharing the most tokens: among the longest stored
  // prefix and the entry sharing the most, each itself or, for a delta,
  // its base.
  std::string base_file;
  size_t base_length = 0;
  int64_t shared = 0;
  bool superseded = false;  // the base is a prefix of the prompt that this Put removes
  {
    std::lock_guard<std::mutex> l(mu);
    // An entry that delta entries are based on stays whole when replaced.
    if (index.HasDependents(self)) return std::nullopt;
    std::vector<const StoreIndex::Entry*> found;
    const StoreIndex::Entry* prefix = index.FindLongestPrefix(model, tokens, hashes, tokens.size() - 1);
    if (prefix != nullptr) found.push_back(prefix);
    int64_t common = 0;
    const int64_t at_least = prefix != nullptr ? static_cast<int64_t>(prefix->key.tokens.size()) : 0;
    if (const StoreIndex::Entry* longer = index.FindLonger(model, tokens, hashes, at_least, common)) {
      found.push_back(longer);
    }
    for (const StoreIndex::Entry* e : found) {
      if (!e->base.empty()) e = index.Find(e->base);
      if (e == nullptr || !e->base.empty() || e->fingerprint != digest || e->key.model != model || e->file == self) {
        continue;
      }
      const int64_t n = std::min(CommonPrefix(e->key.tokens, tokens), length - 1);
      if (n > shared) {
        shared = n;
        base_file = e->file;
        base_length = e->key.tokens.size();
      }
    }
    superseded = supersedes && shared == static_cast<int64_t>(base_length) && !index.HasDependents(base_file);
  }
  // A conversation that only grows (a prompt, then prompt + completion, the
  // next turn) stays one whole file: the Put supersedes its prefix.
  if (shared < kMinDeltaBase || superseded) return std::nullopt;
  DeltaPlan plan{StoreBase{base_file, shared}, {}};
  const std::vector<const Cache*> leaf_caches = LeafCaches(cache);
  for (size_t i = 0; i < leaves->size(); ++i) {
    Result<LeafRowSource> source = LeafRowSource::Of(*leaf_caches[i], (*leaves)[i], length);
    std::optional<LeafRows> rows = source.ok() ? source->Rows(shared, length) : std::nullopt;
    if (!rows) return std::nullopt;  // e.g. a ChunkedKVCache that no longer holds them
    Result<std::shared_ptr<Cache>> piece = RowsPiece((*leaves)[i], *rows);
    if (!piece.ok()) return std::nullopt;
    plan.rows.push_back(std::move(*piece));
  }
  return plan;
}

Result<PromptCache> PromptCacheStore::Impl::JoinBase(const StoreBase& base, const ModelFingerprint& fingerprint,
                                                     const std::string& model, std::span<const int32_t> key,
                                                     const PromptCache& rows) {
  const int64_t length = static_cast<int64_t>(key.size());
  const std::string where = "its base " + base.file;
  std::optional<std::vector<LeafInfo>> leaves = RowsLeaves(fingerprint);
  if (!leaves || base.tokens >= length || rows.size() != leaves->size()) {
    return Status::Corruption("a delta entry of a model it cannot hold, or of no rows");
  }
  // The base's generation, to drop it when it is corrupt. A base not
  // indexed (the directory is still being indexed, or a race left the file
  // unlisted) is loaded by its name all the same.
  std::optional<uint64_t> generation;
  {
    std::lock_guard<std::mutex> l(mu);
    if (const StoreIndex::Entry* e = index.Find(base.file)) generation = e->generation;
  }
  LoadPromptCacheOptions options;
  options.verify = true;
  Result<LoadedPromptCache> loaded = LoadPromptCache(env, Path(base.file), options);
  const StatusCode code = loaded.ok() ? StatusCode::kOk : loaded.status().code();
  if (code == StatusCode::kIOError || code == StatusCode::kNotFound) return loaded.status().WithPrefix(where);
  if (!loaded.ok() || !loaded->verified) {
    // A corrupt base is dropped as any corrupt entry is, so that the next
    // Put sharing its prefix writes a whole entry instead of another delta
    // entry on it.
    const std::string why = loaded.ok() ? "has no digests to verify" : loaded.status().ToString();
    if (generation) Drop(base.file, *generation, corrupt_dropped, why);
    return Status::Corruption(where + " " + why);
  }
  std::optional<StoreKey> held = StoreKeyFromMetadata(loaded->user_metadata);
  Result<std::optional<StoreBase>> base_of_base = StoreBaseFromMetadata(loaded->user_metadata);
  if (!held || held->model != model || static_cast<int64_t>(held->tokens.size()) < base.tokens ||
      !std::ranges::equal(std::span(held->tokens).first(base.tokens), key.first(base.tokens)) ||
      !base_of_base.ok() || base_of_base->has_value()) {
    return Status::Corruption(where + " does not hold the tokens shared, or is itself a delta entry");
  }
  KV_RETURN_IF_ERROR(fingerprint.Check(loaded->cache).WithPrefix(where));
  const int64_t base_length = static_cast<int64_t>(held->tokens.size());
  KV_RETURN_IF_ERROR(CheckLeafTokens(loaded->cache, base_length).WithPrefix(where));
  RebuildInputs inputs;
  inputs.tokens = length;
  const std::vector<const Cache*> base_leaves = LeafCaches(loaded->cache);
  for (size_t i = 0; i < leaves->size(); ++i) {
    const LeafInfo& leaf = (*leaves)[i];
    KV_ASSIGN_OR_RETURN(LeafRowSource source, LeafRowSource::Of(*base_leaves[i], leaf, base_length));
    std::optional<LeafRows> head = source.Rows(0, base.tokens);
    if (!head) return Status::Corruption(where + ": layer " + leaf.path + " lacks the rows shared");
    KV_ASSIGN_OR_RETURN(LeafRows tail, RowsOfPiece(*rows[i], leaf, length - base.tokens));
    inputs.rows[leaf.path] = {std::move(*head), std::move(tail)};
  }
  return RebuildPromptCache(fingerprint.spec(), inputs);
}

}  // namespace kvstore
