// ServerPromptCache across its tiers: every hit leaves a token to process,
// whichever tier serves it and under either memory policy, and the longest
// prefix any tier holds wins (the disk asked whenever it could beat memory,
// the shared tier when a whole chunk could beat both).
#include "kvstore/arrays_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe;
using testing::Iota;
using testing::Tokens;
using testing::TrimmedTo;

constexpr MemoryPolicy kPolicies[] = {MemoryPolicy::kMlxLm, MemoryPolicy::kServer};

PromptCache Attention(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  testing::Prefill(*kv, tokens, tokens, seed);
  return {kv};
}

// An attention layer and a snapshot layer: nothing can be trimmed.
PromptCache Hybrid(int64_t tokens, uint64_t seed) {
  auto arrays = std::make_shared<ArraysCache>(1);
  EXPECT_OK(arrays->SetSlot(0, testing::RandomArray(DType::kF16, {1, 4}, seed + static_cast<uint64_t>(tokens))));
  PromptCache out = Attention(tokens, seed);
  out.push_back(arrays);
  return out;
}

Tokens Plus(Tokens t, int32_t extra) {
  t.push_back(extra);
  return t;
}

// The hit came from `tier`, reuses `reused` tokens and holds `cache`.
void ExpectServed(const std::optional<ServerPromptCache::Hit>& hit, PromptCacheTier tier, int64_t reused,
                  const PromptCache& cache) {
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tier, tier);
  EXPECT_EQ(hit->reused, reused);
  EXPECT_EQ(Describe(hit->cache), Describe(cache));
}

struct Store {
  std::unique_ptr<Env> env = NewMemEnv();
  std::unique_ptr<PromptCacheStore> store;
  Store() {
    auto opened = PromptCacheStore::Open(env.get(), "/store", {});
    EXPECT_OK(opened.status());
    store = std::move(opened).value();
    EXPECT_OK(store->WaitUntilIndexed());
  }
};

// A restart, then the same prompt again (regenerate): the disk holds the
// prompt itself, or the prompt and its completion. mlx-lm's server must get
// at least one token to process (it cannot generate from an empty
// remainder), so the hit is trimmed by one token, as LRUPromptCache trims a
// longer entry to all but the query's last token.
TEST(ServerPromptCacheTiersTest, ADiskHitOfTheWholePromptLeavesOneToken) {
  for (MemoryPolicy policy : kPolicies) {
    SCOPED_TRACE(MemoryPolicyName(policy));
    Store s;
    const PromptCache prompt = Attention(40, 1), conversation = Attention(60, 2);
    const ModelFingerprint fp = testing::FingerprintOf(prompt, "m");
    ASSERT_OK(s.store->Put(fp, Iota(40), prompt));
    ASSERT_OK(s.store->Put(fp, Iota(60, 5000), conversation));
    ServerPromptCache cache({.disk = s.store.get(), .memory_policy = policy});
    ASSERT_OK_AND_ASSIGN(auto exact, cache.Fetch(fp, Iota(40)));
    ExpectServed(exact, PromptCacheTier::kDisk, 39, TrimmedTo(prompt, 39));
    const Tokens whole = Iota(60, 5000);
    const Tokens regenerate(whole.begin(), whole.begin() + 45);
    ASSERT_OK_AND_ASSIGN(auto longer, ServerPromptCache({.disk = s.store.get(), .memory_policy = policy})
                                          .Fetch(fp, regenerate));
    ExpectServed(longer, PromptCacheTier::kDisk, 44, TrimmedTo(conversation, 44));
  }
}

// A model that cannot trim: the disk's entry of the whole prompt cannot give
// its last token back, so the disk is asked again for the prompt less that
// token and serves the checkpoint stored with it.
TEST(ServerPromptCacheTiersTest, AnUntrimmableWholePromptHitFallsBackToItsCheckpoint) {
  for (MemoryPolicy policy : kPolicies) {
    SCOPED_TRACE(MemoryPolicyName(policy));
    Store s;
    const PromptCache full = Hybrid(8, 1), checkpoint = Hybrid(4, 1);
    const ModelFingerprint fp = testing::FingerprintOf(full, "m");
    const PromptCacheCheckpoint checkpoints[] = {{4, checkpoint}};
    {
      ServerPromptCache writer({.disk = s.store.get(), .memory_policy = policy});
      ASSERT_OK(writer.Insert(fp, Iota(8), full, checkpoints));
    }
    ServerPromptCache restarted({.disk = s.store.get(), .memory_policy = policy});
    ASSERT_OK_AND_ASSIGN(auto hit, restarted.Fetch(fp, Iota(8)));
    ExpectServed(hit, PromptCacheTier::kDisk, 4, checkpoint);
  }
}

// The disk writes an insert's checkpoints before the whole cache, so a
// trimmable cache supersedes those it can serve (>= 32 tokens) and the disk
// keeps one entry; an untrimmable one keeps its checkpoints.
TEST(ServerPromptCacheTiersTest, ATrimmableInsertLeavesNoCheckpointOnDisk) {
  for (bool trimmable : {true, false}) {
    SCOPED_TRACE(trimmable ? "trimmable" : "hybrid");
    Store s;
    const PromptCache full = trimmable ? Attention(80, 1) : Hybrid(80, 1);
    const PromptCache checkpoint = trimmable ? TrimmedTo(full, 40) : Hybrid(40, 1);
    const ModelFingerprint fp = testing::FingerprintOf(full, "m");
    const PromptCacheCheckpoint checkpoints[] = {{40, checkpoint}};
    {
      ServerPromptCache writer({.disk = s.store.get()});
      ASSERT_OK(writer.Insert(fp, Iota(80), full, checkpoints));
    }
    EXPECT_EQ(s.store->entries(), trimmable ? 1 : 2);
    EXPECT_EQ(s.store->prefixes_superseded(), trimmable ? 1 : 0);
    ASSERT_OK_AND_ASSIGN(auto hit, ServerPromptCache({.disk = s.store.get()}).Fetch(fp, Plus(Iota(40), 7)));
    ExpectServed(hit, PromptCacheTier::kDisk, 40, checkpoint);
  }
}

// Another server stored a prompt of exactly two chunks: the shared tier's
// hit of the whole query gives one token back too.
TEST(ServerPromptCacheTiersTest, ASharedHitOfTheWholePromptLeavesOneToken) {
  for (MemoryPolicy policy : kPolicies) {
    SCOPED_TRACE(MemoryPolicyName(policy));
    std::unique_ptr<KvBackend> backend = NewMemKvBackend();
    auto tier = testing::OpenTier(backend.get(), 16);
    const PromptCache stored = Attention(32, 3);
    const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
    ServerPromptCache other({.shared = tier.get(), .memory_policy = policy});
    ASSERT_OK(other.Insert(fp, Iota(32), stored));
    other.Flush();  // the write is queued
    ServerPromptCache cache({.shared = tier.get(), .memory_policy = policy});
    ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(fp, Iota(32)));
    ExpectServed(hit, PromptCacheTier::kShared, 31, TrimmedTo(stored, 31));
  }
}

// After one unrelated request, memory holds a short prefix (mlx-lm's trie
// counts one shared first token as a hit): the disk's longer prefix still
// wins, under either policy. Only the server policy keeps it in memory.
TEST(ServerPromptCacheTiersTest, ALongerDiskPrefixBeatsAMemoryHit) {
  for (MemoryPolicy policy : kPolicies) {
    SCOPED_TRACE(MemoryPolicyName(policy));
    Store s;
    const PromptCache old = Attention(40, 4);
    const ModelFingerprint fp = testing::FingerprintOf(old, "m");
    ASSERT_OK(s.store->Put(fp, Iota(40), old));
    ServerPromptCache cache({.disk = s.store.get(), .memory_policy = policy});
    ASSERT_OK(cache.Insert(fp, Plus(Iota(1), 7), Attention(2, 5)));  // shares the first token only
    ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(fp, Plus(Iota(40), 9)));
    ExpectServed(hit, PromptCacheTier::kDisk, 40, old);
    EXPECT_EQ(cache.memory_usage().entries, policy == MemoryPolicy::kServer ? 2 : 1);
    const PromptCacheMetrics m = cache.metrics();
    EXPECT_EQ(m.tier(PromptCacheTier::kDisk).hits, 1);
    EXPECT_EQ(m.tier(PromptCacheTier::kMemory).misses, 1);  // asked, not served
  }
}

// A disk entry no longer than the memory hit is not even read: the one
// below records another configuration, so reading it would refuse it.
TEST(ServerPromptCacheTiersTest, TheDiskIsNotReadWhenItCannotBeatMemory) {
  for (MemoryPolicy policy : kPolicies) {
    SCOPED_TRACE(MemoryPolicyName(policy));
    Store s;
    const PromptCache ours = Attention(10, 6);
    const ModelFingerprint fp = testing::FingerprintOf(ours, "m");
    const PromptCache wider = {std::make_shared<KVCache>()};
    testing::Prefill(*wider[0], 5, 5, 7, 4);  // 4 heads: another configuration of model "m"
    ASSERT_OK(s.store->Put(testing::FingerprintOf(wider, "m"), Iota(5), wider));
    ServerPromptCache cache({.disk = s.store.get(), .memory_policy = policy});
    ASSERT_OK(cache.Insert(PromptScope{fp.digest().ToHex()}, Iota(10), ours));  // memory only
    const Tokens query = Plus(Plus(Iota(10), 3), 4);
    ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(fp, query));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tier, PromptCacheTier::kMemory);
    EXPECT_EQ(hit->reused, 10);
    EXPECT_EQ(s.store->fingerprint_refused(), 0);
    // With nothing in memory it is read, and refused.
    ASSERT_OK_AND_ASSIGN(auto miss, ServerPromptCache({.disk = s.store.get(), .memory_policy = policy})
                                        .Fetch(fp, query));
    EXPECT_FALSE(miss.has_value());
    EXPECT_EQ(s.store->fingerprint_refused(), 1);
  }
}

// The shared tier costs a round trip: it is asked only when the chunks it
// could serve reach past what memory and disk serve by a whole chunk
// boundary (chunks of 16 here).
TEST(ServerPromptCacheTiersTest, TheSharedTierIsAskedOnlyWhenAChunkCouldBeatTheOthers) {
  for (MemoryPolicy policy : kPolicies) {
    SCOPED_TRACE(MemoryPolicyName(policy));
    Store s;
    std::unique_ptr<KvBackend> backend = NewMemKvBackend();
    auto tier = testing::OpenTier(backend.get(), 16);
    const PromptCache stored = Attention(48, 8);
    const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
    {
      ServerPromptCache other({.shared = tier.get()});
      ASSERT_OK(other.Insert(fp, Iota(48), stored));
    }
    ServerPromptCache cache({.disk = s.store.get(), .shared = tier.get(), .memory_policy = policy});
    ASSERT_OK(cache.Insert(fp, Iota(30), TrimmedTo(stored, 30)));
    cache.Flush();
    const int64_t before = tier->stats().fetches;
    // Memory (and disk) serve 30 of 40: the chunk boundary at 32 is past it.
    ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(fp, Iota(40)));
    ExpectServed(hit, PromptCacheTier::kShared, 32, TrimmedTo(stored, 32));
    EXPECT_EQ(tier->stats().fetches, before + 1);
    // The disk serves 33 of 40: no chunk boundary lies past it, so the shared
    // tier is not asked.
    ASSERT_OK(s.store->Put(fp, Iota(33), TrimmedTo(stored, 33)));
    ASSERT_OK_AND_ASSIGN(auto disk, cache.Fetch(fp, Iota(40)));
    ASSERT_TRUE(disk.has_value());
    EXPECT_EQ(disk->tier, PromptCacheTier::kDisk);
    EXPECT_EQ(disk->reused, 33);
    EXPECT_EQ(tier->stats().fetches, before + 1);
  }
}

}  // namespace
}  // namespace kvstore
