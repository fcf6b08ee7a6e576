#include "kvstore/server_prompt_cache.h"

#include <thread>

#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/kv_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe;
using testing::Iota;
using testing::Tokens;
using testing::TrimmedTo;

PromptCache Prompt(int64_t tokens, uint64_t seed) { return testing::OneLayerPrompt(tokens, seed); }
const ModelFingerprint& Model() { return testing::OneLayerModel(); }

TEST(ServerPromptCacheTest, ServesTheLongestPrefixIncludingOneToken) {
  ServerPromptCache cache({});
  const Tokens one = {7};
  ASSERT_OK(cache.Insert(Model(), one, Prompt(1, 1)));
  const Tokens query = {7, 8, 9};
  ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(Model(), query));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 1);
  EXPECT_EQ(hit->tier, PromptCacheTier::kMemory);
  EXPECT_EQ(hit->cache[0]->offset(), 1);
  ModelSpec other = Model().spec();
  other.model_id = "other";
  ASSERT_OK_AND_ASSIGN(auto other_model, cache.Fetch(*ModelFingerprint::Make(other), query));
  EXPECT_FALSE(other_model.has_value());
  auto wide = std::make_shared<KVCache>();
  Array k = testing::RandomArray(DType::kF16, {1, 1, 1, 16}, 1);
  ASSERT_OK(wide->UpdateAndFetch(k, k));
  EXPECT_THAT(cache.Insert(Model(), one, {wide}),
              testing::HasCode(StatusCode::kInvalidArgument, "k_head_dim 16 != 8"));
}

TEST(ServerPromptCacheTest, ExactMatchLeavesOneTokenAndCopiesAreIndependent) {
  ServerPromptCache cache({});
  const Tokens t = {1, 2, 3, 4};
  ASSERT_OK(cache.Insert(Model(), t, Prompt(4, 2)));
  ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(Model(), t));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 3);
  // Writing into the served copy does not change what the cache holds.
  Array k = testing::RandomArray(DType::kF16, {1, 1, 5, 8}, 3);
  ASSERT_OK(hit->cache[0]->UpdateAndFetch(k, k));
  ASSERT_OK_AND_ASSIGN(std::optional<ServerPromptCache::Hit> again, cache.Fetch(Model(), t));
  ASSERT_TRUE(again.has_value());
  ASSERT_EQ(again->cache.size(), 1u);
  EXPECT_EQ(again->cache.front()->offset(), 3);
}

// The "edit the last message" case: a longer cached prompt is trimmed to
// the common prefix when every layer can be trimmed.
TEST(ServerPromptCacheTest, ServesAPrefixOfALongerPromptByTrimming) {
  ServerPromptCache cache({});
  const Tokens conversation = Iota(200);
  const PromptCache stored = Prompt(200, 5);
  ASSERT_OK(cache.Insert(Model(), conversation, stored));
  Tokens edited(conversation.begin(), conversation.begin() + 150);
  edited.push_back(-1);
  edited.push_back(-2);
  ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(Model(), edited));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 150);
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(stored, 150)));
  // A query that is a strict prefix of the stored prompt: all but one token.
  ASSERT_OK_AND_ASSIGN(auto prefix, cache.Fetch(Model(), std::span(conversation).first(40)));
  ASSERT_TRUE(prefix.has_value());
  EXPECT_EQ(prefix->reused, 39);
  // A shorter stored prefix loses to the longer common prefix.
  ASSERT_OK(cache.Insert(Model(), std::span(conversation).first(64), Prompt(64, 6)));
  ASSERT_OK_AND_ASSIGN(auto again, cache.Fetch(Model(), edited));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->reused, 150);
  // Caches that cannot be trimmed are only served as stored prefixes.
  auto arrays = std::make_shared<ArraysCache>(1);
  ASSERT_OK(arrays->SetSlot(0, testing::RandomArray(DType::kF32, {1, 4}, 1)));
  const PromptCache hybrid = {std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{arrays, Prompt(200, 7)[0]})};
  const ModelFingerprint hybrid_model = testing::FingerprintOf(hybrid, "h");
  ASSERT_OK(cache.Insert(hybrid_model, conversation, hybrid));
  ASSERT_OK_AND_ASSIGN(auto none, cache.Fetch(hybrid_model, edited));
  EXPECT_FALSE(none.has_value());
  EXPECT_EQ(cache.stats().hits[0], 3);
  EXPECT_EQ(cache.stats().misses, 1);
}

TEST(ServerPromptCacheTest, FetchRefreshesRecencyAndBudgetsHold) {
  ServerPromptCache cache({2, int64_t{1} << 30});
  const Tokens a = {1}, b = {2}, c = {3};
  ASSERT_OK(cache.Insert(Model(), a, Prompt(1, 1)));
  ASSERT_OK(cache.Insert(Model(), b, Prompt(1, 2)));
  const Tokens qa = {1, 9};
  ASSERT_OK(cache.Fetch(Model(), qa));  // a becomes most recent
  ASSERT_OK(cache.Insert(Model(), c, Prompt(1, 3)));  // evicts b, not a
  const Tokens qb = {2, 9};
  EXPECT_TRUE(cache.Fetch(Model(), qa).value().has_value());
  EXPECT_FALSE(cache.Fetch(Model(), qb).value().has_value());
  EXPECT_EQ(cache.stats().entries, 2);
  ServerPromptCache tiny({100, 1});  // every entry is over the byte budget
  ASSERT_OK(tiny.Insert(Model(), a, Prompt(1, 1)));
  EXPECT_EQ(tiny.stats().entries, 0);
}

TEST(ServerPromptCacheTest, DiskHitsAreServedAndKeptInMemory) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  ASSERT_OK(store->WaitUntilIndexed());
  const Tokens t = Iota(50);
  {
    ServerPromptCache writer({.disk = store.get()});
    ASSERT_OK(writer.Insert(Model(), t, Prompt(50, 9)));
  }
  ServerPromptCache cache({.disk = store.get()});  // a restart: memory is empty
  Tokens query = t;
  query.push_back(5);
  ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch(Model(), query));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tier, PromptCacheTier::kDisk);
  EXPECT_EQ(hit->reused, 50);
  ASSERT_OK_AND_ASSIGN(auto again, cache.Fetch(Model(), query));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->tier, PromptCacheTier::kMemory);
  EXPECT_EQ(Describe(again->cache), Describe(Prompt(50, 9)));
}

// Two server processes (each with its own memory) on one shared tier.
TEST(ServerPromptCacheTest, AnotherServersPrefixComesFromTheSharedTier) {
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier_a = testing::OpenTier(backend.get(), 16, "", false, "a");
  auto tier_b = testing::OpenTier(backend.get(), 16, "", false, "b");
  ServerPromptCache a({.shared = tier_a.get()}), b({.shared = tier_b.get()});
  const Tokens system = Iota(64);
  const PromptCache stored = Prompt(64, 11);
  ASSERT_OK(a.Insert(Model(), system, stored));
  a.Flush();  // the shared tier's writes are queued: a's chunks are stored first
  ASSERT_OK(b.Insert(Model(), std::span(system).first(20), Prompt(20, 11)));  // b knows a shorter prefix
  b.Flush();
  Tokens query = system;
  query.push_back(-5);
  ASSERT_OK_AND_ASSIGN(auto hit, b.Fetch(Model(), query));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tier, PromptCacheTier::kShared);
  EXPECT_EQ(hit->reused, 64);
  EXPECT_EQ(hit->foreign_tokens, 64);
  EXPECT_EQ(Describe(hit->cache), Describe(stored));
  ASSERT_OK_AND_ASSIGN(auto again, b.Fetch(Model(), query));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->tier, PromptCacheTier::kMemory);
  // The query ending on a chunk boundary: one token is given back.
  ASSERT_OK_AND_ASSIGN(auto exact, ServerPromptCache({.shared = tier_b.get()}).Fetch(Model(), system));
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->reused, 63);
  EXPECT_EQ(Describe(exact->cache), Describe(TrimmedTo(stored, 63)));
}

TEST(ServerPromptCacheTest, ConcurrentFetchAndInsert) {
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier = testing::OpenTier(backend.get(), 2, "", true);
  ServerPromptCache cache({.max_entries = 64, .max_bytes = int64_t{1} << 30, .shared = tier.get()});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 200; ++i) {
        const Tokens key = {i % 16, t, 1, 2};
        EXPECT_OK(cache.Insert(Model(), key, Prompt(4, static_cast<uint64_t>(i))));
        const Tokens q = {i % 16, t, 1, 2, 5};
        auto hit = cache.Fetch(Model(), q);
        EXPECT_OK(hit);
      }
    });
  }
  for (auto& th : threads) th.join();
  tier->Flush();
  EXPECT_LE(cache.stats().entries, 64);
}

}  // namespace
}  // namespace kvstore
