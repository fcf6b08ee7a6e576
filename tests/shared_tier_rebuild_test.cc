// The shared tier rebuilds, bit for bit, the cache the original would be
// after trim_prompt_cache to k*C tokens (or, for layers that cannot be cut
// by tokens, the state the writer had at that boundary): for every class,
// on synthetic caches, on the fixtures written by mlx-lm and on caches
// replayed from the oracle traces.
#include <filesystem>

#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/json.h"
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "kvstore/safetensors.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::CopyOf;
using testing::Describe;
using testing::Iota;
using testing::OpenTier;
using testing::Prefill;
using testing::Tokens;
using testing::TrimmedTo;

constexpr int64_t kC = 16;

// Inserts `cache` (holding `tokens`) and fetches every boundary k*C with a
// query of k*C + extra tokens; each hit must equal `reference(k)`, and
// boundaries with a reference must be hits.
void ExpectEveryBoundary(const PromptCache& cache, const Tokens& tokens, int64_t chunk,
                         const std::function<std::optional<PromptCache>(int64_t k)>& reference,
                         std::span<const PromptCacheCheckpoint> checkpoints = {}) {
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier = OpenTier(backend.get(), chunk);
  const ModelFingerprint fp = testing::FingerprintOf(cache);
  ASSERT_OK(tier->Insert(fp, tokens, cache, checkpoints));
  const int64_t count = static_cast<int64_t>(tokens.size()) / chunk;
  for (int64_t k = 1; k <= count; ++k) {
    SCOPED_TRACE("boundary " + std::to_string(k * chunk));
    const size_t query = std::min(tokens.size(), static_cast<size_t>(k * chunk + k % chunk));
    ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp, std::span(tokens).first(query)));
    std::optional<PromptCache> want = reference(k);
    ASSERT_EQ(hit.has_value(), want.has_value());
    if (!hit) continue;
    EXPECT_EQ(hit->tokens, k * chunk);
    EXPECT_EQ(Describe(hit->cache), Describe(*want));
  }
}

PromptCache Filled(std::shared_ptr<Cache> layer, int64_t tokens, int64_t step) {
  Prefill(*layer, tokens, step, 11);
  return {layer};
}

TEST(SharedTierRebuildTest, AttentionClassesRebuildToTheTrimmedCache) {
  const int64_t n = 5 * kC + 7;
  const Tokens tokens = Iota(n);
  struct Case {
    std::string name;
    std::function<PromptCache()> make;
  };
  const std::vector<Case> cases = {
      {"KVCache prefill", [&] { return Filled(std::make_shared<KVCache>(), n, 13); }},
      {"KVCache decode", [&] { return Filled(std::make_shared<KVCache>(), n, 1); }},
      {"QuantizedKVCache g32 b4", [&] { return Filled(std::make_shared<QuantizedKVCache>(32, 4), n, 13); }},
      {"QuantizedKVCache g32 b8", [&] { return Filled(std::make_shared<QuantizedKVCache>(32, 8), n, 5); }},
      {"ChunkedKVCache", [&] { return Filled(std::make_shared<ChunkedKVCache>(1000), n, 13); }},
      {"RotatingKVCache in its window", [&] { return Filled(std::make_shared<RotatingKVCache>(100, 4), n, 13); }},
      {"RotatingKVCache decode", [&] { return Filled(std::make_shared<RotatingKVCache>(100, 4), n, 1); }},
      {"CacheList(KVCache, RotatingKVCache)", [&] {
         auto kv = std::make_shared<KVCache>();
         auto rot = std::make_shared<RotatingKVCache>(128, 0);
         Prefill(*kv, n, 9, 3);
         Prefill(*rot, n, 9, 4);
         return PromptCache{std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{kv, rot})};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const PromptCache cache = c.make();
    ASSERT_TRUE(CanTrimPromptCache(cache));
    ExpectEveryBoundary(cache, tokens, kC, [&](int64_t k) { return TrimmedTo(cache, k * kC); });
  }
}

TEST(SharedTierRebuildTest, ARebuiltCacheGoesOnLikeTheTrimmedOne) {
  const PromptCache cache = Filled(std::make_shared<RotatingKVCache>(64, 4), 3 * kC + 5, 7);
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier = OpenTier(backend.get(), kC);
  const ModelFingerprint fp = testing::FingerprintOf(cache);
  const Tokens tokens = Iota(3 * kC + 5);
  ASSERT_OK(tier->Insert(fp, tokens, cache));
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp, tokens));
  ASSERT_TRUE(hit.has_value());
  PromptCache trimmed = TrimmedTo(cache, hit->tokens);
  // Past the window: the in-place path wraps, the concat path trims.
  for (int64_t step : {40, 1, 1, 9}) {
    Prefill(*hit->cache[0], step, 1, 99);
    Prefill(*trimmed[0], step, 1, 99);
    EXPECT_EQ(Describe(hit->cache), Describe(trimmed));
  }
}

// A rotating cache past its window is served from snapshots taken at the
// boundaries the writer had; within the window, from rows.
TEST(SharedTierRebuildTest, RotatingWindowsComeFromCheckpointSnapshots) {
  const int64_t n = 6 * kC;
  const Tokens tokens = Iota(n);
  auto rot = std::make_shared<RotatingKVCache>(2 * kC, 4);
  std::vector<PromptCacheCheckpoint> checkpoints;
  for (int64_t done = 0; done < n; done += kC) {
    Prefill(*rot, kC, kC, static_cast<uint64_t>(done) + 1);
    if (done + kC < n) checkpoints.push_back({done + kC, CopyOf({rot})});
  }
  const PromptCache cache = {rot};
  ASSERT_FALSE(CanTrimPromptCache(cache));
  auto at = [&](int64_t k) -> std::optional<PromptCache> {
    if (k * kC == n) return CopyOf(cache);
    return CopyOf(checkpoints[static_cast<size_t>(k - 1)].cache);
  };
  ExpectEveryBoundary(cache, tokens, kC, at, checkpoints);
  // Without checkpoints only the end of the insert (a boundary) is served:
  // the writer no longer holds the first window's rows.
  ExpectEveryBoundary(cache, tokens, kC, [&](int64_t k) -> std::optional<PromptCache> {
    return k * kC == n ? std::optional<PromptCache>(CopyOf(cache)) : std::nullopt;
  });
}

// ArraysCache and MambaCache, alone and next to attention in a CacheList:
// a boundary needs a snapshot; the attention child comes from rows.
TEST(SharedTierRebuildTest, SnapshotLayersNeedTheStateAtTheBoundary) {
  const int64_t n = 4 * kC;
  const Tokens tokens = Iota(n);
  for (const std::string cls : {"ArraysCache", "MambaCache", "CacheList"}) {
    SCOPED_TRACE(cls);
    std::shared_ptr<ArraysCache> arrays =
        cls == "MambaCache" ? std::make_shared<MambaCache>() : std::make_shared<ArraysCache>(2);
    auto kv = std::make_shared<KVCache>();
    PromptCache cache = {cls == "CacheList" ? std::shared_ptr<Cache>(std::make_shared<CacheList>(
                                                  std::vector<std::shared_ptr<Cache>>{arrays, kv}))
                                            : std::shared_ptr<Cache>(arrays)};
    std::vector<PromptCacheCheckpoint> checkpoints;
    for (int64_t k = 1; k <= 4; ++k) {
      ASSERT_OK(arrays->SetSlot(0, testing::RandomArray(DType::kBF16, {1, 3, 16}, 100 + k)));
      ASSERT_OK(arrays->SetSlot(1, testing::RandomArray(DType::kF32, {1, 2, 8, 4}, 200 + k)));
      Prefill(*kv, kC, 5, static_cast<uint64_t>(k));
      if (k < 4) checkpoints.push_back({k * kC, CopyOf(cache)});
    }
    ExpectEveryBoundary(cache, tokens, kC, [&](int64_t k) {
      return k == 4 ? CopyOf(cache) : CopyOf(checkpoints[static_cast<size_t>(k - 1)].cache);
    }, checkpoints);
    // The end of an insert that is not a boundary leaves no snapshot.
    PromptCache longer = CopyOf(cache);
    if (cls == "CacheList") Prefill(*dynamic_cast<CacheList&>(*longer[0]).child(1), 3, 3, 9);
    ExpectEveryBoundary(longer, Iota(n + 3), kC, [&](int64_t) { return std::optional<PromptCache>(); });
  }
}

// A ChunkedKVCache that dropped its first rows cannot be rebuilt exactly
// (mlx-lm restores start_position 0 only): its chunks are not written, and
// a writer that still has those rows fills them in.
TEST(SharedTierRebuildTest, FrontTrimmedChunkedCachesAreACleanMiss) {
  const Tokens tokens = Iota(5 * kC);
  auto trimmed = std::make_shared<ChunkedKVCache>(20);
  for (int64_t done = 0; done < 5 * kC; done += 8) {
    ASSERT_OK(trimmed->MaybeTrimFront());
    Prefill(*trimmed, 8, 8, static_cast<uint64_t>(done));
  }
  ASSERT_GT(trimmed->start_position(), 0);
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier = OpenTier(backend.get(), kC);
  const ModelFingerprint fp = testing::FingerprintOf({trimmed});
  ASSERT_OK(tier->Insert(fp, tokens, {trimmed}));
  EXPECT_GT(tier->stats().chunks_incomplete, 0);
  ASSERT_OK_AND_ASSIGN(auto miss, tier->Fetch(fp, tokens));
  EXPECT_FALSE(miss.has_value());

  auto whole = std::make_shared<ChunkedKVCache>(20);
  Prefill(*whole, 2 * kC, 2 * kC, 5);
  ASSERT_OK(tier->Insert(fp, std::span(tokens).first(2 * kC), {whole}));
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp, tokens));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 2 * kC);
  EXPECT_EQ(Describe(hit->cache), Describe({whole}));
}

// ---- Caches written by mlx-lm and replayed from its traces ----


// Whether every ChunkedKVCache in it still starts at position 0.
bool HoldsItsWholeHistory(const PromptCache& cache) {
  bool whole = true;
  std::function<void(const Cache&)> visit = [&](const Cache& c) {
    if (const auto* list = dynamic_cast<const CacheList*>(&c)) {
      for (size_t i = 0; i < list->num_children(); ++i) visit(*list->child(i));
    } else if (const auto* ch = dynamic_cast<const ChunkedKVCache*>(&c)) {
      whole = whole && ch->start_position() == 0;
    }
  };
  for (const auto& layer : cache) visit(*layer);
  return whole;
}

// The smallest chunk size >= 4 that cuts n in at least two chunks; n when
// there is none.
int64_t ChunkFor(int64_t n) {
  for (int64_t c = 4; c <= n / 2; ++c) {
    if (n % c == 0) return c;
  }
  return n;
}

struct RoundTrip {
  bool supported = false;     // every layer can be chunked
  bool consistent = true;     // every layer holds the same tokens, for one sequence
  bool end_served = false;
};

// Inserts `cache` under `chunk`-token chunks and fetches every boundary:
// each one served equals the trimmed cache (or, at the end, the cache
// itself); a cache whose every layer can be cut (and still holds its whole
// history) is served at every boundary, and at its end when that is one.
RoundTrip CheckRoundTrip(const PromptCache& cache, int64_t chunk) {
  RoundTrip out;
  const int64_t n = std::max<int64_t>(8, testing::TokensHeld(cache));  // 8 for caches without offsets
  Result<ModelFingerprint> fp = ModelFingerprint::Of("fixture", cache);
  if (!fp.ok()) return out;
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier = OpenTier(backend.get(), chunk);
  const Tokens tokens = Iota(n);
  Status inserted = tier->Insert(*fp, tokens, cache);
  if (tier->stats().unsupported > 0) return out;
  out.supported = true;
  if (inserted.code() == StatusCode::kInvalidArgument &&
      (inserted.message().find(" tokens") != std::string::npos ||  // "offset 37 != 38 tokens"
       inserted.message().find("batch-1") != std::string::npos)) {
    // CacheList children at different offsets, or a batch of sequences: not one prompt's cache.
    out.consistent = false;
    return out;
  }
  EXPECT_OK(inserted);
  const bool trimmable = CanTrimPromptCache(cache);
  for (int64_t k = 1; k <= n / chunk; ++k) {
    SCOPED_TRACE("boundary " + std::to_string(k * chunk) + " of " + std::to_string(n));
    Result<std::optional<SharedPromptCache::Hit>> hit = tier->Fetch(*fp, std::span(tokens).first(k * chunk));
    EXPECT_OK(hit);
    const bool end = k * chunk == n;
    const bool has_reference = end || trimmable;
    if (hit.ok() && hit->has_value()) {
      EXPECT_TRUE(has_reference) << "served a boundary with nothing to compare it with";
      if (has_reference) {
        EXPECT_EQ(Describe((*hit)->cache), Describe(end ? cache : TrimmedTo(cache, k * chunk)));
      }
      out.end_served = out.end_served || end;
    } else if (has_reference && HoldsItsWholeHistory(cache)) {
      const SharedPromptCache::Stats st = tier->stats();
      ADD_FAILURE() << "not served (values read " << st.values_read << ", corrupt " << st.corrupt << ", mismatched "
                    << st.mismatched << ", vanished " << st.vanished << ", written " << st.chunks_written << "+"
                    << st.snapshots_written << ", incomplete " << st.chunks_incomplete << ") " << st.last_refusal;
    }
  }
  return out;
}

// Both round trips: chunks that end on the cache's end, and (when every
// layer can be cut) 4-token chunks.
RoundTrip CheckRoundTrips(const PromptCache& cache) {
  const int64_t n = std::max<int64_t>(8, testing::TokensHeld(cache));
  RoundTrip r = CheckRoundTrip(cache, ChunkFor(n));
  if (r.supported && r.consistent && CanTrimPromptCache(cache)) (void)CheckRoundTrip(cache, 4);
  return r;
}

TEST(SharedTierRebuildTest, FixturesWrittenByMlxLm) {
  const std::vector<std::string> fixtures = testing::MlxLmFixtures();
  ASSERT_GE(fixtures.size(), testing::kMlxLmFixturesShipped);
  size_t loaded = 0, supported = 0, inconsistent = 0, served_at_end = 0;
  for (const std::string& path : fixtures) {
    SCOPED_TRACE(path);
    Result<LoadedPromptCache> file = LoadPromptCache(Env::Default(), path);
    if (!file.ok()) continue;  // not a prompt cache (the quantization oracle)
    ++loaded;
    const RoundTrip r = CheckRoundTrips(file->cache);
    supported += r.supported;
    inconsistent += !r.consistent;
    served_at_end += r.end_served;
  }
  // 19 shipped: 18 prompt caches, 2 of them batch caches; of the others one
  // CacheList has children at different offsets and one ChunkedKVCache has
  // dropped its first rows.
  EXPECT_GE(loaded, 18u);
  EXPECT_GE(supported, 16u);
  EXPECT_LE(inconsistent, 1u);
  EXPECT_GE(served_at_end, 14u);
}

std::string Str(const Json* j) { return j != nullptr && j->is_string() ? j->as_string() : ""; }

// Replays a trace's update_and_fetch calls on its single-sequence caches
// (with the engine's own inputs and update sizes) and round-trips the
// result.
TEST(SharedTierRebuildTest, CachesReplayedFromTheTraces) {
  const std::string dir = testing::FixturePath("traces");
  size_t traces = 0, replayed = 0, served = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!std::filesystem::exists(entry.path() / "trace.json")) continue;
    ++traces;
    Result<Json> trace = Json::Parse(testing::ReadFileString((entry.path() / "trace.json").string()));
    ASSERT_OK(trace);
    Result<std::shared_ptr<const SafetensorsFile>> inputs =
        SafetensorsFile::Open(Env::Default(), (entry.path() / "inputs.safetensors").string());
    if (!inputs.ok()) continue;
    for (const Json& spec : trace->Find("caches")->as_array()) {
      const std::string cls = Str(spec.Find("class"));
      const Json* args = spec.Find("args");
      auto arg = [&](std::string_view key, int64_t fallback) {
        const Json* v = args != nullptr ? args->Find(key) : nullptr;
        if (v == nullptr || !v->is_integer()) return fallback;
        return v->type() == Json::Type::kInt ? v->as_int() : static_cast<int64_t>(v->as_uint());
      };
      std::shared_ptr<Cache> cache;
      if (cls == "KVCache") cache = std::make_shared<KVCache>();
      if (cls == "RotatingKVCache") cache = std::make_shared<RotatingKVCache>(arg("max_size", 1), arg("keep", 0));
      if (cls == "ChunkedKVCache") cache = std::make_shared<ChunkedKVCache>(arg("chunk_size", 1));
      if (cls == "QuantizedKVCache") {
        cache = std::make_shared<QuantizedKVCache>(static_cast<int>(arg("group_size", 64)),
                                                   static_cast<int>(arg("bits", 8)));
      }
      if (cache == nullptr) continue;
      bool ok = true;
      for (const Json& op : trace->Find("ops")->as_array()) {
        if (Str(op.Find("target")) != Str(spec.Find("name")) || Str(op.Find("method")) != "update_and_fetch") continue;
        const Json* a = op.Find("args");
        const Json* keys = a != nullptr ? a->Find("keys") : nullptr;
        const Json* values = a != nullptr ? a->Find("values") : nullptr;
        Result<Array> k = (*inputs)->Tensor(keys != nullptr ? Str(keys->Find("input")) : "");
        Result<Array> v = (*inputs)->Tensor(values != nullptr ? Str(values->Find("input")) : "");
        if (!k.ok() || !v.ok()) {
          ok = false;
          break;
        }
        auto* q = dynamic_cast<QuantizedKVCache*>(cache.get());
        ok = q != nullptr ? q->UpdateAndFetchQuantized(*k, *v).ok() : cache->UpdateAndFetch(*k, *v).ok();
        if (!ok) break;  // an update the trace expects to raise
      }
      if (!ok || cache->Empty() || cache->offset().value_or(0) < 2) continue;
      SCOPED_TRACE(entry.path().filename().string() + "/" + Str(spec.Find("name")));
      const RoundTrip r = CheckRoundTrips({cache});
      replayed += r.supported && r.consistent;
      served += r.end_served;
    }
  }
  EXPECT_GE(traces, 50u);
  // KVCache, RotatingKVCache (prefill, decode, wrapped), QuantizedKVCache and ChunkedKVCache caches.
  EXPECT_GE(replayed, 25u);
  EXPECT_EQ(served, replayed);
}

}  // namespace
}  // namespace kvstore
