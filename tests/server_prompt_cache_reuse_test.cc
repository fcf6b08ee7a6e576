// ServerPromptCache serves a cache only when every layer, CacheList
// children included, holds exactly the tokens it claims to reuse.
#include <memory>

#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe;
using testing::Iota;
using testing::Tokens;
using testing::TrimmedTo;

PromptCache ListOf(std::vector<std::shared_ptr<Cache>> children) {
  return {std::make_shared<CacheList>(std::move(children))};
}

// A conversation Iota(n) whose message after token `kept` was edited.
Tokens EditedAfter(int64_t kept) {
  Tokens t = Iota(kept);
  t.push_back(-1);
  return t;
}

std::shared_ptr<KVCache> Attention(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  testing::Prefill(*kv, tokens, tokens, seed);
  return kv;
}

// What a CacheList's Trim reports (mlx-lm's value: its last child's count)
// and why a server cannot rely on it.
TEST(ServerPromptCacheReuseTest, CacheListTrimReportsItsLastChild) {
  auto chunked = std::make_shared<ChunkedKVCache>(32);
  testing::Prefill(*chunked, 200, 200, 1);
  ASSERT_OK(chunked->MaybeTrimFront());
  CacheList list({chunked, Attention(200, 2)});
  ASSERT_OK_AND_ASSIGN(int64_t trimmed, list.Trim(50));
  EXPECT_EQ(trimmed, 50);
  EXPECT_EQ(list.child(0)->offset(), 168);  // gave back the 32 it held
  EXPECT_EQ(list.child(1)->offset(), 150);
}

// CacheList{ChunkedKVCache front-trimmed to its last chunk, KVCache}: the
// chunked child cannot give back 50 tokens (it holds 32), while the list's
// own Trim reports its last child's 50.
TEST(ServerPromptCacheReuseTest, EveryCacheListChildMustTrimExactly) {
  auto chunked = std::make_shared<ChunkedKVCache>(32);
  testing::Prefill(*chunked, 200, 200, 1);
  ASSERT_OK(chunked->MaybeTrimFront());
  const PromptCache stored = ListOf({chunked, Attention(200, 2)});
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  ServerPromptCache server({});
  ASSERT_OK(server.Insert(fp, Iota(200), stored));
  ASSERT_OK_AND_ASSIGN(auto hit, server.Fetch(fp, EditedAfter(150)));
  EXPECT_FALSE(hit.has_value()) << "served with child 0 at offset "
                                << dynamic_cast<CacheList&>(*hit->cache[0]).child(0)->offset().value_or(-1);
  EXPECT_EQ(server.stats().misses, 1);
  // The chunked child can give back what it holds: the hit is consistent.
  ASSERT_OK_AND_ASSIGN(auto close, server.Fetch(fp, EditedAfter(190)));
  ASSERT_TRUE(close.has_value());
  EXPECT_EQ(close->reused, 190);
  const auto& list = dynamic_cast<const CacheList&>(*close->cache[0]);
  EXPECT_EQ(list.child(0)->offset(), 190);
  EXPECT_EQ(list.child(1)->offset(), 190);
}

TEST(ServerPromptCacheReuseTest, CacheListOfAttentionLayersIsServedTrimmed) {
  const PromptCache stored = ListOf({Attention(100, 3), Attention(100, 4)});
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  ServerPromptCache server({});
  ASSERT_OK(server.Insert(fp, Iota(100), stored));
  ASSERT_OK_AND_ASSIGN(auto hit, server.Fetch(fp, EditedAfter(60)));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 60);
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(stored, 60)));
}

// A cache stored under a key must hold exactly the key's tokens, or it
// would be served as the longer prompt.
TEST(ServerPromptCacheReuseTest, InsertRefusesLayersHoldingAnotherTokenCount) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  ASSERT_OK(store->WaitUntilIndexed());
  ServerPromptCache server({.disk = store.get()});
  const PromptCache fifty = {Attention(50, 1)};
  const ModelFingerprint fp = testing::FingerprintOf(fifty, "m");
  const Tokens t = Iota(100);
  EXPECT_THAT(server.Insert(fp, t, fifty),
              testing::HasCode(StatusCode::kInvalidArgument, "layer 0 (KVCache): offset 50 != 100 tokens"));
  const PromptCache uneven = ListOf({Attention(40, 1), Attention(41, 2)});
  EXPECT_THAT(server.Insert(testing::FingerprintOf(uneven, "l"), std::span(t).first(40), uneven),
              testing::HasCode(StatusCode::kInvalidArgument, "layer 0.1 (KVCache): offset 41 != 40 tokens"));
  const PromptCacheCheckpoint checkpoints[] = {{20, {Attention(30, 3)}}};
  EXPECT_THAT(server.Insert(fp, std::span(t).first(50), fifty, checkpoints),
              testing::HasCode(StatusCode::kInvalidArgument, "checkpoint at 20 tokens: layer 0 (KVCache): offset 30"));
  EXPECT_THAT(store->Put(fp, t, fifty), testing::HasCode(StatusCode::kInvalidArgument, "offset 50 != 100 tokens"));
  EXPECT_EQ(server.stats().entries, 0);
  EXPECT_EQ(store->entries(), 0);
  // A rotating layer counts every token it has seen, not its buffer.
  auto rotating = std::make_shared<RotatingKVCache>(16, 4);
  testing::Prefill(*rotating, 40, 8, 4);
  const PromptCache window = {rotating};
  const ModelFingerprint rfp = testing::FingerprintOf(window, "r");
  ASSERT_OK(server.Insert(rfp, std::span(t).first(40), window));
  EXPECT_THAT(server.Insert(rfp, std::span(t).first(16), window),
              testing::HasCode(StatusCode::kInvalidArgument, "offset 40 != 16 tokens"));
  // Snapshot layers have no offset.
  auto arrays = std::make_shared<ArraysCache>(1);
  ASSERT_OK(arrays->SetSlot(0, testing::RandomArray(DType::kF16, {1, 4}, 5)));
  const PromptCache hybrid = ListOf({arrays, Attention(30, 6)});
  ASSERT_OK(server.Insert(testing::FingerprintOf(hybrid, "h"), std::span(t).first(30), hybrid));
  server.Flush();  // disk writes are queued
  EXPECT_EQ(server.stats().entries, 2);
  EXPECT_EQ(store->entries(), 2);
}

// An attention layer and a snapshot layer: nothing can be trimmed.
PromptCache Hybrid(int64_t tokens, uint64_t seed) {
  auto arrays = std::make_shared<ArraysCache>(1);
  EXPECT_OK(arrays->SetSlot(0, testing::RandomArray(DType::kF16, {1, 4}, seed + static_cast<uint64_t>(tokens))));
  return {Attention(tokens, seed), arrays};
}

// The same prompt sent again (regenerate) to a model that cannot trim: the
// 8-token entry cannot give its last token back, so its 4-token checkpoint
// is served, from memory and, after a restart, from disk.
TEST(ServerPromptCacheReuseTest, ExactRepeatOfAnUntrimmableModelUsesTheCheckpoint) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  ASSERT_OK(store->WaitUntilIndexed());
  const Tokens t = Iota(8);
  const PromptCache full = Hybrid(8, 1), checkpoint = Hybrid(4, 1);
  const ModelFingerprint fp = testing::FingerprintOf(full, "m");
  const PromptCacheCheckpoint checkpoints[] = {{4, checkpoint}};
  ServerPromptCache server({.disk = store.get()});
  ASSERT_OK(server.Insert(fp, t, full, checkpoints));
  ASSERT_EQ(server.stats().entries, 2);
  ASSERT_OK_AND_ASSIGN(auto hit, server.Fetch(fp, t));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->reused, 4);
  EXPECT_EQ(hit->tier, PromptCacheTier::kMemory);
  EXPECT_EQ(Describe(hit->cache), Describe(checkpoint));
  Tokens longer = t;
  longer.push_back(99);
  ASSERT_OK_AND_ASSIGN(auto whole, server.Fetch(fp, longer));
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->reused, 8);

  server.Flush();
  ServerPromptCache restarted({.disk = store.get()});
  ASSERT_OK_AND_ASSIGN(auto from_disk, restarted.Fetch(fp, t));
  ASSERT_TRUE(from_disk.has_value());
  EXPECT_EQ(from_disk->reused, 4);
  EXPECT_EQ(from_disk->tier, PromptCacheTier::kDisk);
  EXPECT_EQ(Describe(from_disk->cache), Describe(checkpoint));
  EXPECT_EQ(restarted.stats().misses, 0);
}

// "Edit the last message" in every tier: a prompt of 100 tokens is stored,
// the next request shares its first 60. Memory and disk serve the stored
// cache trimmed to 60; the shared tier serves its last chunk boundary
// within them (48, chunks of 16).
TEST(ServerPromptCacheReuseTest, EditedLastMessageIsServedByEveryTier) {
  const PromptCache stored = {Attention(100, 9)};
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  ASSERT_OK(store->WaitUntilIndexed());
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier = testing::OpenTier(backend.get(), 16);
  ServerPromptCache writer({.disk = store.get(), .shared = tier.get()});
  ASSERT_OK(writer.Insert(fp, Iota(100), stored));
  writer.Flush();
  struct Case {
    ServerPromptCacheOptions options;
    PromptCacheTier tier;
    int64_t reused;
  };
  const Case cases[] = {{{}, PromptCacheTier::kMemory, 60},
                        {{.disk = store.get()}, PromptCacheTier::kDisk, 60},
                        {{.shared = tier.get()}, PromptCacheTier::kShared, 48}};
  for (const Case& c : cases) {
    ServerPromptCache fresh(c.options);
    ServerPromptCache& server = c.tier == PromptCacheTier::kMemory ? writer : fresh;
    ASSERT_OK_AND_ASSIGN(auto hit, server.Fetch(fp, EditedAfter(60)));
    ASSERT_TRUE(hit.has_value()) << PromptCacheTierName(c.tier);
    EXPECT_EQ(hit->tier, c.tier);
    EXPECT_EQ(hit->reused, c.reused) << PromptCacheTierName(c.tier);
    EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(stored, c.reused))) << PromptCacheTierName(c.tier);
  }
}

// A stored prefix (70 tokens) loses to a longer prompt sharing more (80)
// with the query, in memory and on disk, though both lie in the same
// 32-token granule.
TEST(ServerPromptCacheReuseTest, LongerEntrySharingMoreThanAStoredPrefixWins) {
  const PromptCache stored = {Attention(100, 9)};
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  ASSERT_OK(store->WaitUntilIndexed());
  ServerPromptCache writer({.disk = store.get()});
  ASSERT_OK(writer.Insert(fp, Iota(100), stored));
  ASSERT_OK(writer.Insert(fp, Iota(70), {Attention(70, 10)}));
  writer.Flush();
  ServerPromptCache restarted({.disk = store.get()});
  for (ServerPromptCache* server : {&writer, &restarted}) {
    ASSERT_OK_AND_ASSIGN(auto hit, server->Fetch(fp, EditedAfter(80)));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tier, server == &writer ? PromptCacheTier::kMemory : PromptCacheTier::kDisk);
    EXPECT_EQ(hit->reused, 80);
    EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(stored, 80)));
  }
}

}  // namespace
}  // namespace kvstore
