#include "kvstore/server_prompt_cache.h"

#include <thread>

#include "kvstore/kv_cache.h"
#include "testutil.h"

namespace kvstore {
namespace {

PromptCache Prompt(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  Array k = testing::RandomArray(DType::kF16, {1, 1, tokens, 8}, seed);
  EXPECT_OK(kv->UpdateAndFetch(k, k));
  return {kv};
}

TEST(ServerPromptCacheTest, ServesTheLongestPrefixIncludingOneToken) {
  ServerPromptCache cache({});
  const std::vector<int32_t> one = {7};
  ASSERT_OK(cache.Insert("m", one, Prompt(1, 1)));
  const std::vector<int32_t> query = {7, 8, 9};
  ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch("m", query));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 1);
  EXPECT_EQ(hit->cache[0]->offset(), 1);
  ASSERT_OK_AND_ASSIGN(auto other_model, cache.Fetch("other", query));
  EXPECT_FALSE(other_model.has_value());
}

TEST(ServerPromptCacheTest, ExactMatchLeavesOneTokenAndCopiesAreIndependent) {
  ServerPromptCache cache({});
  const std::vector<int32_t> t = {1, 2, 3, 4};
  ASSERT_OK(cache.Insert("m", t, Prompt(4, 2)));
  ASSERT_OK_AND_ASSIGN(auto hit, cache.Fetch("m", t));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 3);
  // Writing into the served copy does not change what the cache holds.
  Array k = testing::RandomArray(DType::kF16, {1, 1, 5, 8}, 3);
  ASSERT_OK(hit->cache[0]->UpdateAndFetch(k, k));
  ASSERT_OK_AND_ASSIGN(std::optional<ServerPromptCache::Hit> again, cache.Fetch("m", t));
  ASSERT_TRUE(again.has_value());
  const PromptCache& layers = again->cache;
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers.front()->offset(), 3);
}

TEST(ServerPromptCacheTest, FetchRefreshesRecencyAndBudgetsHold) {
  ServerPromptCache cache({2, int64_t{1} << 30});
  const std::vector<int32_t> a = {1}, b = {2}, c = {3};
  ASSERT_OK(cache.Insert("m", a, Prompt(1, 1)));
  ASSERT_OK(cache.Insert("m", b, Prompt(1, 2)));
  const std::vector<int32_t> qa = {1, 9};
  ASSERT_OK(cache.Fetch("m", qa));  // a becomes most recent
  ASSERT_OK(cache.Insert("m", c, Prompt(1, 3)));  // evicts b, not a
  const std::vector<int32_t> qb = {2, 9};
  EXPECT_TRUE(cache.Fetch("m", qa).value().has_value());
  EXPECT_FALSE(cache.Fetch("m", qb).value().has_value());
  EXPECT_EQ(cache.stats().entries, 2);
  ServerPromptCache tiny({100, 1});  // every entry is over the byte budget
  ASSERT_OK(tiny.Insert("m", a, Prompt(1, 1)));
  EXPECT_EQ(tiny.stats().entries, 0);
}

TEST(ServerPromptCacheTest, ConcurrentFetchAndInsert) {
  ServerPromptCache cache({64, int64_t{1} << 30});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 200; ++i) {
        const std::vector<int32_t> key = {i % 16, t};
        EXPECT_OK(cache.Insert("m", key, Prompt(2, static_cast<uint64_t>(i))));
        const std::vector<int32_t> q = {i % 16, t, 5};
        auto hit = cache.Fetch("m", q);
        EXPECT_OK(hit);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(cache.stats().entries, 64);
}

}  // namespace
}  // namespace kvstore
