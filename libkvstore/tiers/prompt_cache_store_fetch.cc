// PromptCacheStore's lookups: the longest stored prefix of a prompt, or a
// longer entry trimmed to what it shares with the prompt, each loaded and
// checked before it is served.
#include <algorithm>
#include <utility>

#include "kvstore/prompt_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "libkvstore/cache/cache_leaves.h"
#include "libkvstore/tiers/prompt_cache_store_impl.h"

namespace kvstore {
namespace {

bool HoldsKey(const Metadata& metadata, std::string_view model, std::span<const int32_t> tokens) {
  std::optional<StoreKey> held = StoreKeyFromMetadata(metadata);
  return held && held->model == model && std::ranges::equal(held->tokens, tokens);
}

}  // namespace

std::optional<PromptCache> PromptCacheStore::Impl::LoadChecked(const Candidate& c, const std::string& model,
                                                               const ModelFingerprint* fingerprint,
                                                               std::span<const int32_t> key) {
  if (fingerprint != nullptr && c.fingerprint != fingerprint->digest().ToHex()) {
    Refuse(c.file, *fingerprint);
    return std::nullopt;
  }
  LoadPromptCacheOptions options;
  options.verify = true;
  Result<LoadedPromptCache> loaded = LoadPromptCache(env, Path(c.file), options);
  if (!loaded.ok() && loaded.status().code() == StatusCode::kIOError) return std::nullopt;  // maybe transient: keep it
  if (!loaded.ok() && loaded.status().code() == StatusCode::kNotFound) {
    // Removed by another process sharing the directory (an eviction whose
    // manifest line this one has not read yet): forgotten, not bad.
    std::lock_guard<std::mutex> l(mu);
    index.Erase(c.file, c.generation);
    return std::nullopt;
  }
  if (!loaded.ok() || !loaded->verified) {
    Drop(c.file, c.generation, corrupt_dropped,
         loaded.ok() ? "has no digests to verify" : loaded.status().ToString());
    return std::nullopt;
  }
  // The key, and the layers themselves against the fingerprint asked for.
  if (!HoldsKey(loaded->user_metadata, model, key)) {
    Drop(c.file, c.generation, mismatched_dropped, "holds another key than its name");
    return std::nullopt;
  }
  // A delta entry: its base's rows first, under the fingerprint it records.
  Result<std::optional<StoreBase>> base = StoreBaseFromMetadata(loaded->user_metadata);
  if (!base.ok()) {
    Drop(c.file, c.generation, corrupt_dropped, base.status().ToString());
    return std::nullopt;
  }
  if (*base) {
    Result<std::optional<ModelFingerprint>> recorded = RecordedFingerprint(loaded->user_metadata);
    if (recorded.ok() && !*recorded) recorded = Status::Corruption("a delta entry records no fingerprint");
    Result<PromptCache> joined = recorded.ok() ? JoinBase(**base, **recorded, model, key, loaded->cache)
                                               : Result<PromptCache>(recorded.status());
    // The base unreadable for an I/O error (maybe transient): kept, as a
    // whole entry would be; gone or not the entry it was written on: dropped.
    if (!joined.ok() && joined.status().code() == StatusCode::kIOError) return std::nullopt;
    if (!joined.ok()) {
      Drop(c.file, c.generation, mismatched_dropped, joined.status().ToString());
      return std::nullopt;
    }
    {
      std::lock_guard<std::mutex> l(mu);
      index.Touch((*base)->file);
    }
    loaded->cache = std::move(*joined);
  }
  if (Status s = fingerprint != nullptr ? fingerprint->Check(loaded->cache) : Status::OK(); !s.ok()) {
    Drop(c.file, c.generation, mismatched_dropped, "layers of another model configuration: " + s.ToString());
    return std::nullopt;
  }
  // A file can be self-consistent and still hold fewer (or more) tokens
  // than its key names: never served as the key.
  if (Status s = CheckLeafTokens(loaded->cache, static_cast<int64_t>(key.size())); !s.ok()) {
    Drop(c.file, c.generation, corrupt_dropped, s.ToString());
    return std::nullopt;
  }
  return std::move(loaded->cache);
}

std::optional<PromptCacheStore::Hit> PromptCacheStore::Impl::FetchLonger(const std::string& model,
                                                                        const ModelFingerprint* fingerprint,
                                                                        std::span<const int32_t> tokens,
                                                                        std::span<const uint64_t> hashes,
                                                                        int64_t min_tokens) {
  Candidate c;
  std::vector<int32_t> key;
  int64_t common = 0;
  {
    std::lock_guard<std::mutex> l(mu);
    const StoreIndex::Entry* prefix = index.FindLongestPrefix(model, tokens, hashes, tokens.size());
    const int64_t at_least = prefix != nullptr ? static_cast<int64_t>(prefix->key.tokens.size()) : 0;
    const StoreIndex::Entry* e = index.FindLonger(model, tokens, hashes, at_least, common);
    if (e == nullptr || common <= min_tokens) return std::nullopt;
    c = Candidate{e->file, e->fingerprint, e->generation};
    key = e->key.tokens;
  }
  std::optional<PromptCache> cache = LoadChecked(c, model, fingerprint, key);
  if (!cache) return std::nullopt;
  if (TrimEveryLeaf(*cache, static_cast<int64_t>(key.size()) - common, common)) return Hit{std::move(*cache), common};
  if (!CanTrimPromptCache(*cache)) {
    std::lock_guard<std::mutex> l(mu);
    index.MarkUntrimmable(c.file, c.generation);
  }
  return std::nullopt;
}

Result<std::optional<PromptCacheStore::Hit>> PromptCacheStore::Impl::Fetch(const std::string& model,
                                                                          const ModelFingerprint* fingerprint,
                                                                          std::span<const int32_t> tokens,
                                                                          int64_t min_tokens) {
  if (static_cast<int64_t>(tokens.size()) <= min_tokens) return std::optional<Hit>();
  FollowManifest();
  IndexPrefixesByName(model, tokens);
  const std::vector<uint64_t> hashes = PrefixHashes(model, tokens);
  if (std::optional<Hit> longer = FetchLonger(model, fingerprint, tokens, hashes, min_tokens)) return longer;
  // Each failed candidate lowers max_len, so the whole search is O(prompt).
  const size_t shortest = static_cast<size_t>(std::max<int64_t>(min_tokens, 0)) + 1;
  for (size_t max_len = tokens.size(); max_len >= shortest;) {
    Candidate c;
    size_t length = 0;
    {
      std::lock_guard<std::mutex> l(mu);
      const StoreIndex::Entry* e = index.FindLongestPrefix(model, tokens, hashes, max_len);
      if (e == nullptr || e->key.tokens.size() < shortest) break;
      c = Candidate{e->file, e->fingerprint, e->generation};
      length = e->key.tokens.size();
    }
    max_len = length - 1;
    if (std::optional<PromptCache> cache = LoadChecked(c, model, fingerprint, tokens.first(length))) {
      return std::optional<Hit>(Hit{std::move(*cache), static_cast<int64_t>(length)});
    }
  }
  return std::optional<Hit>();
}

}  // namespace kvstore
