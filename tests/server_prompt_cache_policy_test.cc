// ServerPromptCache's memory policies (mlx-lm's LRUPromptCache and the
// server's LRU), entries a binding supplies, asynchronous disk writes and
// the counters of metrics().
#include <random>
#include <thread>

#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe;
using testing::Iota;
using testing::Tokens;

PromptCache Attention(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  testing::Prefill(*kv, tokens, tokens, seed);
  return {kv};
}

// Past its window: not trimmable.
PromptCache Rotating(int64_t tokens, uint64_t seed) {
  auto rotating = std::make_shared<RotatingKVCache>(4, 1);
  testing::Prefill(*rotating, tokens, 1, seed);
  return {rotating};
}

// The remaining tokens and the cache of a fetch, as LRUPromptCache reports them.
std::string Outcome(const std::optional<PromptCache>& cache, std::span<const int32_t> remaining) {
  std::string out = cache ? Describe(*cache) : "miss\n";
  for (int32_t t : remaining) out += std::to_string(t) + ",";
  return out;
}

// Random inserts (three cache types, trimmable or not, two models), fetches
// and trim_to calls: the mlx-lm policy serves exactly what LRUPromptCache
// serves, and holds the same entries.
TEST(ServerPromptCachePolicyTest, MlxLmPolicyIsLRUPromptCache) {
  for (auto [max_size, max_bytes] : {std::pair<int64_t, int64_t>{10, LRUPromptCache::kNoLimit}, {4, 1 << 20},
                                     {50, 300000}}) {
    LRUPromptCache reference(max_size, max_bytes);
    ServerPromptCache cache({.max_entries = max_size, .max_bytes = max_bytes, .memory_policy = MemoryPolicy::kMlxLm});
    std::mt19937 rng(7);
    const std::vector<Tokens> stems = {{1, 2, 3, 4}, {1, 2, 9}, {7, 8}, {5}};
    std::vector<Tokens> prompts;  // prompts sharing prefixes
    for (int i = 0; i < 12; ++i) {
      Tokens t = stems[rng() % stems.size()];
      for (int extra = static_cast<int>(rng() % 5); extra > 0; --extra) t.push_back(static_cast<int32_t>(rng() % 6));
      prompts.push_back(t);
    }
    int hits = 0;
    for (int step = 0; step < 400; ++step) {
      Tokens t = prompts[rng() % prompts.size()];
      const std::string model = rng() % 5 == 0 ? "other" : "m";
      const unsigned op = rng() % 20;
      if (op < 9) {
        const auto type = static_cast<CacheType>(rng() % kNumCacheTypes);
        const uint64_t seed = rng();
        PromptCache layers = rng() % 3 == 0 ? Rotating(static_cast<int64_t>(t.size()), seed)
                                            : Attention(static_cast<int64_t>(t.size()), seed);
        ASSERT_OK(reference.InsertCache(model, t, testing::CopyOf(layers), type));
        ASSERT_OK(cache.Insert({model}, t, layers, {.cache_type = type}));
      } else if (op < 19) {
        t.resize(rng() % (t.size() + 1));
        if (rng() % 2 == 0) t.push_back(static_cast<int32_t>(rng() % 6));
        ASSERT_OK_AND_ASSIGN(LRUPromptCache::FetchResult want, reference.FetchNearestCache(model, t));
        ASSERT_OK_AND_ASSIGN(std::optional<ServerPromptCache::Hit> got, cache.Fetch(PromptScope{model}, t));
        std::optional<PromptCache> got_cache;
        std::span<const int32_t> rest = t;
        if (got) {
          got_cache = got->cache;
          rest = rest.subspan(static_cast<size_t>(got->reused));
        }
        ASSERT_EQ(Outcome(got_cache, rest), Outcome(want.cache, want.remaining)) << "step " << step;
        hits += want.cache ? 1 : 0;
      } else {
        const std::optional<int64_t> n = rng() % 2 ? std::optional<int64_t>(rng() % 6) : std::nullopt;
        const std::optional<int64_t> b = rng() % 2 ? std::optional<int64_t>(rng() % 400000) : std::nullopt;
        reference.TrimTo(n, b);
        cache.TrimTo(n, b);
      }
      const ServerPromptCache::MemoryUsage usage = cache.memory_usage();
      ASSERT_EQ(usage.entries, reference.size()) << "step " << step;
      ASSERT_EQ(usage.bytes, reference.nbytes()) << "step " << step;
      ASSERT_EQ(cache.StatsByType(), reference.StatsByType()) << "step " << step;
    }
    EXPECT_GT(hits, 50) << max_size << " entries, " << max_bytes << " bytes";
  }
}

// A binding's entry: counts its live instances and, when released while
// the cache is in use, calls back into it (which would deadlock if the
// cache still held its lock, as a Python entry waiting for the GIL would).
class TestEntry final : public MemoryEntry {
 public:
  TestEntry(int id, int64_t bytes, bool trimmable, std::atomic<const ServerPromptCache*>* cache,
            std::atomic<int>* live)
      : id_(id), bytes_(bytes), trimmable_(trimmable), cache_(cache), live_(live) {
    ++*live_;
  }
  ~TestEntry() override {
    if (const ServerPromptCache* cache = cache_->load()) (void)cache->memory_usage();
    --*live_;
  }
  int64_t bytes() const override { return bytes_; }
  bool trimmable() const override { return trimmable_; }
  int id() const { return id_; }

 private:
  int id_;
  int64_t bytes_;
  bool trimmable_;
  std::atomic<const ServerPromptCache*>* cache_;  // null once the cache is being destroyed
  std::atomic<int>* live_;
};

TEST(ServerPromptCachePolicyTest, BindingEntriesAreHandedBackAndReleasedOutsideTheLock) {
  for (MemoryPolicy policy : {MemoryPolicy::kMlxLm, MemoryPolicy::kServer}) {
    std::atomic<int> live{0};
    std::atomic<const ServerPromptCache*> in_use{nullptr};
    {
      ServerPromptCache cache({.max_entries = 2, .memory_policy = policy});
      in_use = &cache;
      auto insert = [&](int id, const Tokens& t, bool trimmable) {
        auto entry = std::make_shared<TestEntry>(id, 100, trimmable, &in_use, &live);
        ASSERT_OK(cache.Insert({"m"}, t, {}, {.memory_entry = std::move(entry)}));
      };
      insert(1, Iota(100), true);
      Tokens query = Iota(60);
      query.push_back(-1);  // the last message edited
      ASSERT_OK_AND_ASSIGN(auto edited, cache.Fetch(PromptScope{"m"}, query));
      ASSERT_TRUE(edited.has_value()) << MemoryPolicyName(policy);
      EXPECT_TRUE(edited->cache.empty());
      EXPECT_EQ(static_cast<const TestEntry&>(*edited->entry).id(), 1);
      EXPECT_EQ(edited->entry_tokens, 100);
      EXPECT_EQ(edited->reused, 60);  // the caller trims its copy by 40
      insert(2, {7, 8}, false);
      insert(3, {7, 9}, false);  // over max_entries: entry 1 leaves, released outside the lock
      EXPECT_EQ(cache.memory_usage().entries, 2);
      EXPECT_EQ(cache.memory_usage().bytes, 200);
      EXPECT_EQ(live.load(), 3);  // `edited` still holds entry 1
      cache.TrimTo(0, std::nullopt);
      EXPECT_EQ(live.load(), 1);
      edited.reset();
      EXPECT_EQ(live.load(), 0);
      insert(4, {1}, true);
      in_use = nullptr;
    }
    EXPECT_EQ(live.load(), 0);
  }
}

// Under the mlx-lm policy an exact memory hit is served whole, as
// LRUPromptCache serves it; a persistent tier is asked whenever it could
// serve more than memory, leaves one token of the query to process, and its
// hit is served as loaded, not kept in memory.
TEST(ServerPromptCachePolicyTest, MlxLmPolicyServesMemoryWholeAndPersistentHitsLeaveAToken) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  const PromptCache stored = Attention(40, 3);
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  {
    ServerPromptCache writer({.disk = store.get(), .memory_policy = MemoryPolicy::kMlxLm});
    ASSERT_OK(writer.Insert(fp, Iota(40), stored));
    ASSERT_OK(writer.Insert(fp, Iota(20), Attention(20, 4)));
    ASSERT_OK_AND_ASSIGN(auto exact, writer.Fetch(fp, Iota(40)));
    ASSERT_TRUE(exact.has_value());
    EXPECT_EQ(exact->tier, PromptCacheTier::kMemory);
    EXPECT_EQ(exact->reused, 40);  // remaining: nothing, as mlx-lm
    EXPECT_EQ(Describe(exact->cache), Describe(stored));
    writer.TrimTo(std::nullopt, std::nullopt);
  }
  ServerPromptCache cache({.disk = store.get(), .memory_policy = MemoryPolicy::kMlxLm});
  ASSERT_OK(cache.Insert(fp, Iota(10), Attention(10, 5)));
  // Memory holds 10 of the 40 tokens, the disk all 40: the disk serves 39.
  ASSERT_OK_AND_ASSIGN(auto disk, cache.Fetch(fp, Iota(40)));
  ASSERT_TRUE(disk.has_value());
  EXPECT_EQ(disk->tier, PromptCacheTier::kDisk);
  EXPECT_EQ(disk->reused, 39);
  EXPECT_EQ(Describe(disk->cache), Describe(testing::TrimmedTo(stored, 39)));
  EXPECT_EQ(cache.memory_usage().entries, 1);  // not kept
  // Memory's hit when the disk holds nothing longer.
  Tokens other = Iota(10);
  other.push_back(-1);
  ASSERT_OK_AND_ASSIGN(auto memory, cache.Fetch(fp, other));
  ASSERT_TRUE(memory.has_value());
  EXPECT_EQ(memory->tier, PromptCacheTier::kMemory);
  EXPECT_EQ(memory->reused, 10);
}

TEST(ServerPromptCachePolicyTest, EmptyTokenKeysFollowThePolicy) {
  ServerPromptCache server({});
  EXPECT_THAT(server.Insert(PromptScope{"m"}, Tokens{}, {}), testing::HasCode(StatusCode::kInvalidArgument, "empty"));
  ServerPromptCache mlx_lm({.memory_policy = MemoryPolicy::kMlxLm});
  ASSERT_OK(mlx_lm.Insert(PromptScope{"m"}, Tokens{}, {}));
  ASSERT_OK_AND_ASSIGN(auto hit, mlx_lm.Fetch(PromptScope{"m"}, Tokens{}));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 0);
  EXPECT_EQ(ParseMemoryPolicy("mlx-lm").value(), MemoryPolicy::kMlxLm);
  EXPECT_THAT(ParseMemoryPolicy("fifo"), testing::HasCode(StatusCode::kInvalidArgument, "fifo"));
}

}  // namespace
}  // namespace kvstore
