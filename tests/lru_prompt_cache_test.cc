#include "kvstore/lru_prompt_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kvstore/prompt_cache.h"
#include "testutil.h"

namespace kvstore {

namespace {

using ::kvstore::testing::HasCode;
using Tokens = std::vector<int32_t>;

// A cache with a fixed byte size, a trimmable flag and an offset; Trim
// lowers the offset like KVCache.
class FakeCache : public Cache {
 public:
  FakeCache(int64_t nbytes, bool trimmable, int64_t offset, std::string name = "FakeCache")
      : nbytes_(nbytes), trimmable_(trimmable), offset_(offset), name_(std::move(name)) {}
  FakeCache(const FakeCache&) = default;

  std::string_view class_name() const override { return name_; }
  std::unique_ptr<Cache> Copy() const override { return std::make_unique<FakeCache>(*this); }
  std::optional<int64_t> offset() const override { return offset_; }
  int64_t Size() const override { return offset_; }
  bool Empty() const override { return offset_ == 0; }
  Result<int64_t> Nbytes() const override {
    if (nbytes_ < 0) return Status::FailedPrecondition("FakeCache: nbytes of an empty cache");
    return nbytes_;
  }
  bool IsTrimmable() const override { return trimmable_; }
  Result<int64_t> Trim(int64_t n) override {
    if (fail_trim_) return Status::Internal("FakeCache: trim failed");
    const int64_t removed = std::min(n, offset_);
    offset_ -= removed;
    return removed;
  }

  void set_nbytes(int64_t nbytes) { nbytes_ = nbytes; }
  void set_fail_trim(bool fail) { fail_trim_ = fail; }

 private:
  int64_t nbytes_;
  bool trimmable_;
  int64_t offset_;
  std::string name_;
  bool fail_trim_ = false;
};

PromptCache Layers(int64_t nbytes, bool trimmable = true, int64_t offset = 1) {
  return PromptCache{std::make_shared<FakeCache>(nbytes, trimmable, offset)};
}

Tokens Iota(size_t n, int32_t first) {
  Tokens out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

std::string TokensString(const Tokens& tokens) {
  std::string out = "[";
  for (size_t i = 0; i < tokens.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(tokens[i]);
  return out + "]";
}

// "assistant: m[1,2] | user: | system: m[5,6] m[11,12]"
std::string OrderString(const LRUPromptCache& lru) {
  std::string out;
  for (CacheType type : kCacheTypes) {
    if (!out.empty()) out += " | ";
    out += std::string(CacheTypeName(type)) + ":";
    for (const PromptKey& key : lru.Order(type)) out += " " + key.model + TokensString(key.tokens);
  }
  return out;
}

// "m[1,2] assistant 4096 FakeCache; ..." in trie order.
std::string EntriesString(const LRUPromptCache& lru) {
  std::string out;
  for (const LRUPromptCache::EntryInfo& e : lru.Entries()) {
    if (!out.empty()) out += "; ";
    out += e.model + TokensString(e.tokens) + " " + std::string(CacheTypeName(e.cache_type)) + " " +
           std::to_string(e.nbytes);
    for (const std::string& c : e.classes) out += " " + c;
  }
  return out;
}

// (n_sequences, n_bytes) per tier, in tier order.
std::vector<int64_t> Stats(const LRUPromptCache& lru) {
  std::vector<int64_t> out;
  for (const auto& s : lru.StatsByType()) {
    out.push_back(s.n_sequences);
    out.push_back(s.n_bytes);
  }
  return out;
}

const FakeCache& Fake(const PromptCache& cache, size_t i = 0) {
  return static_cast<const FakeCache&>(*cache[i]);
}

TEST(CacheTypeTest, NamesRoundTripAndUnknownIsNotFound) {
  for (CacheType type : kCacheTypes) {
    ASSERT_OK_AND_ASSIGN(CacheType parsed, ParseCacheType(CacheTypeName(type)));
    EXPECT_EQ(parsed, type);
  }
  EXPECT_EQ(CacheTypeName(CacheType::kUser), "user");
  EXPECT_THAT(ParseCacheType("tool"), HasCode(StatusCode::kNotFound, "unknown cache_type 'tool'"));
  EXPECT_THAT(ParseCacheType("Assistant"), HasCode(StatusCode::kNotFound, "'Assistant'"));
}

// The lru_tiers trace with non-trimmable 4096-byte entries (its KVCaches
// hold no common prefixes, so trimmability plays no part there).
TEST(LRUPromptCacheTest, TierEvictionMatchesTrace) {
  LRUPromptCache lru(3);
  auto insert = [&](Tokens tokens, CacheType type) {
    ASSERT_OK(lru.InsertCache("m", tokens, Layers(4096, false), type));
  };
  insert({1, 2}, CacheType::kAssistant);
  insert({3, 4}, CacheType::kUser);
  insert({5, 6}, CacheType::kSystem);
  EXPECT_EQ(Stats(lru), (std::vector<int64_t>{1, 4096, 1, 4096, 1, 4096}));
  // (A,U,S) = (2,1,1): assistant evicted.
  insert({7, 8}, CacheType::kAssistant);
  EXPECT_EQ(OrderString(lru), "assistant: m[7,8] | user: m[3,4] | system: m[5,6]");
  // (1,2,1): 1 < 2, user has 2 >= 1: the oldest user entry.
  insert({9, 10}, CacheType::kUser);
  EXPECT_EQ(OrderString(lru), "assistant: m[7,8] | user: m[9,10] | system: m[5,6]");
  // (1,1,2): assistant 1 >= 1.
  insert({11, 12}, CacheType::kSystem);
  EXPECT_EQ(OrderString(lru), "assistant: | user: m[9,10] | system: m[5,6] m[11,12]");
  // (0,1,3): user 1 < 3, so the oldest system entry.
  insert({13}, CacheType::kSystem);
  EXPECT_EQ(OrderString(lru), "assistant: | user: m[9,10] | system: m[11,12] m[13]");
  insert({14, 15}, CacheType::kUser);
  EXPECT_EQ(OrderString(lru), "assistant: | user: m[14,15] | system: m[11,12] m[13]");
  // (1,1,2): the victim is the assistant entry just inserted.
  insert({16}, CacheType::kAssistant);
  EXPECT_EQ(OrderString(lru), "assistant: | user: m[14,15] | system: m[11,12] m[13]");
  EXPECT_EQ(EntriesString(lru),
            "m[11,12] system 4096 FakeCache; m[13] system 4096 FakeCache; "
            "m[14,15] user 4096 FakeCache");
  EXPECT_EQ(lru.size(), 3);
  EXPECT_EQ(lru.nbytes(), 12288);
  // Re-inserting an existing key moves it to the new tier.
  insert({14, 15}, CacheType::kAssistant);
  EXPECT_EQ(OrderString(lru), "assistant: m[14,15] | user: | system: m[11,12] m[13]");
  EXPECT_EQ(Stats(lru), (std::vector<int64_t>{1, 4096, 0, 0, 2, 8192}));
  EXPECT_EQ(lru.nbytes(), 12288);
}

struct EvictionCase {
  std::vector<CacheType> inserts;  // the last insert makes size() exceed max_size
  int64_t max_size;
  std::string order_after;
};

TEST(LRUPromptCacheTest, EvictionChoiceByTierCounts) {
  using enum CacheType;
  const EvictionCase cases[] = {
      // Counts (A,U,S) = (1,2,0) when evicting: a user entry goes.
      {{kAssistant, kUser, kUser}, 2, "assistant: m[0] | user: m[2] | system:"},
      // (2,1,0): an assistant entry goes.
      {{kAssistant, kUser, kAssistant}, 2, "assistant: m[2] | user: m[1] | system:"},
      // (0,0,1): the system entry goes, although it was just inserted.
      {{kSystem}, 0, "assistant: | user: | system:"},
      // (0,1,1): user 1 >= system 1.
      {{kSystem, kUser}, 1, "assistant: | user: | system: m[0]"},
      // (0,1,2): the oldest system entry.
      {{kSystem, kSystem, kUser}, 2, "assistant: | user: m[2] | system: m[1]"},
  };
  for (const EvictionCase& c : cases) {
    LRUPromptCache lru(c.max_size);
    for (size_t i = 0; i < c.inserts.size(); ++i) {
      ASSERT_OK(
          lru.InsertCache("m", Tokens{static_cast<int32_t>(i)}, Layers(10, false), c.inserts[i]));
    }
    EXPECT_EQ(OrderString(lru), c.order_after);
  }
}

TEST(LRUPromptCacheTest, MaxSizeEvictsOneEntryPerInsert) {
  LRUPromptCache lru(2);
  for (int32_t t = 0; t < 5; ++t) {
    ASSERT_OK(lru.InsertCache("m", Tokens{t}, Layers(10, false)));
  }
  EXPECT_EQ(OrderString(lru), "assistant: m[3] m[4] | user: | system:");
  // A negative bound is not validated: every insert evicts one entry.
  LRUPromptCache negative(-1);
  ASSERT_OK(negative.InsertCache("m", Tokens{1}, Layers(10, false)));
  EXPECT_EQ(negative.size(), 0);
}

TEST(LRUPromptCacheTest, EvictsWhileOverMaxBytes) {
  LRUPromptCache lru(10, 100);
  ASSERT_OK(lru.InsertCache("m", Tokens{1}, Layers(40, false)));
  ASSERT_OK(lru.InsertCache("m", Tokens{2}, Layers(40, false)));
  ASSERT_OK(lru.InsertCache("m", Tokens{3}, Layers(90, false)));
  // 170 > 100: evict [1] (130), still over: evict [2] (90).
  EXPECT_EQ(OrderString(lru), "assistant: m[3] | user: | system:");
  EXPECT_EQ(lru.nbytes(), 90);
  // An entry larger than the budget evicts everything, itself included.
  ASSERT_OK(lru.InsertCache("m", Tokens{4}, Layers(500, false)));
  EXPECT_EQ(lru.size(), 0);
  EXPECT_EQ(lru.nbytes(), 0);
}

TEST(LRUPromptCacheTest, NbytesIsComputedOnceAtInsertion) {
  LRUPromptCache lru;
  auto layer0 = std::make_shared<FakeCache>(100, true, 3);
  auto layer1 = std::make_shared<FakeCache>(23, true, 3, "KVCache");
  ASSERT_OK(lru.InsertCache("m", Tokens{1, 2, 3}, PromptCache{layer0, layer1}, CacheType::kUser));
  layer0->set_nbytes(5000);
  EXPECT_EQ(lru.nbytes(), 123);
  EXPECT_EQ(EntriesString(lru), "m[1,2,3] user 123 FakeCache KVCache");
  EXPECT_EQ(Stats(lru), (std::vector<int64_t>{0, 0, 1, 123, 0, 0}));
  // Replacing the entry subtracts the bytes recorded at insertion.
  ASSERT_OK(lru.InsertCache("m", Tokens{1, 2, 3}, Layers(7), CacheType::kSystem));
  EXPECT_EQ(lru.nbytes(), 7);
  EXPECT_EQ(Stats(lru), (std::vector<int64_t>{0, 0, 0, 0, 1, 7}));
  EXPECT_EQ(lru.size(), 1);
}

TEST(LRUPromptCacheTest, NbytesErrorLeavesCacheUnchanged) {
  LRUPromptCache lru;
  ASSERT_OK(lru.InsertCache("m", Tokens{1}, Layers(10)));
  EXPECT_THAT(lru.InsertCache("m", Tokens{1, 2}, Layers(-1)),
              HasCode(StatusCode::kFailedPrecondition, "nbytes of an empty cache"));
  EXPECT_EQ(EntriesString(lru), "m[1] assistant 10 FakeCache");
  EXPECT_EQ(lru.nbytes(), 10);
}

TEST(LRUPromptCacheTest, TrimmableInsertRemovesStrictPrefixes) {
  LRUPromptCache lru;
  ASSERT_OK(lru.InsertCache("m", Tokens{}, Layers(1), CacheType::kSystem));
  ASSERT_OK(lru.InsertCache("m", Tokens{1}, Layers(2, false), CacheType::kUser));
  // A non-trimmable insert keeps its prefixes.
  ASSERT_OK(lru.InsertCache("m", Tokens{1, 2}, Layers(4, false)));
  EXPECT_EQ(lru.size(), 3);
  // [1,3] removes [] and [1] (whether or not they are trimmable); [1,2] is
  // no prefix of it.
  ASSERT_OK(lru.InsertCache("m", Tokens{1, 3}, Layers(8)));
  ASSERT_OK(lru.InsertCache("other", Tokens{1}, Layers(16)));
  EXPECT_EQ(EntriesString(lru),
            "m[1,2] assistant 4 FakeCache; m[1,3] assistant 8 FakeCache; "
            "other[1] assistant 16 FakeCache");
  EXPECT_EQ(Stats(lru), (std::vector<int64_t>{3, 28, 0, 0, 0, 0}));
  EXPECT_EQ(lru.nbytes(), 28);
  ASSERT_OK(lru.InsertCache("m", Tokens{1, 2, 5}, Layers(32, false)));
  EXPECT_EQ(lru.size(), 4);
  ASSERT_OK(lru.InsertCache("m", Tokens{1, 2, 5, 6}, Layers(64)));
  EXPECT_EQ(OrderString(lru), "assistant: m[1,3] other[1] m[1,2,5,6] | user: | system:");
  EXPECT_EQ(lru.nbytes(), 88);
  // A cache with no layers counts as trimmable (CanTrimPromptCache([]) is true).
  ASSERT_OK(lru.InsertCache("other", Tokens{1, 9}, PromptCache{}));
  EXPECT_EQ(OrderString(lru), "assistant: m[1,3] m[1,2,5,6] other[1,9] | user: | system:");
}

TEST(LRUPromptCacheTest, EmptyTokensEntry) {
  // The lru_empty_tokens trace.
  LRUPromptCache lru;
  ASSERT_OK(lru.InsertCache("m", Tokens{}, Layers(0, true, 0)));
  EXPECT_EQ(lru.size(), 1);
  EXPECT_EQ(lru.nbytes(), 0);
  ASSERT_OK_AND_ASSIGN(auto hit, lru.FetchNearestCache("m", Tokens{}));
  ASSERT_TRUE(hit.cache.has_value());
  EXPECT_TRUE(hit.remaining.empty());
  ASSERT_OK_AND_ASSIGN(auto miss, lru.FetchNearestCache("m", Tokens{1, 2}));
  EXPECT_FALSE(miss.cache.has_value());
  EXPECT_EQ(miss.remaining, (Tokens{1, 2}));
  ASSERT_OK(lru.InsertCache("m", Tokens{1}, Layers(4096)));
  EXPECT_EQ(EntriesString(lru), "m[1] assistant 4096 FakeCache");
  ASSERT_OK_AND_ASSIGN(auto after, lru.FetchNearestCache("m", Tokens{}));
  EXPECT_FALSE(after.cache.has_value());
  EXPECT_TRUE(after.remaining.empty());
  ASSERT_OK(lru.InsertCache("m", Tokens{1}, Layers(8192), CacheType::kSystem));
  EXPECT_EQ(lru.size(), 1);
  EXPECT_EQ(lru.nbytes(), 8192);
  EXPECT_EQ(Stats(lru), (std::vector<int64_t>{0, 0, 0, 0, 1, 8192}));
}

// The lru_fetch trace, with one fake layer whose offset is the token count.
class FetchTest : public ::testing::Test {
 protected:
  void Insert(const Tokens& tokens, bool trimmable = true, CacheType type = CacheType::kAssistant) {
    ASSERT_OK(lru_.InsertCache("m", tokens, Layers(4096, trimmable, std::ssize(tokens)), type));
  }
  LRUPromptCache::FetchResult Fetch(const Tokens& tokens, std::string_view model = "m") {
    Result<LRUPromptCache::FetchResult> r = lru_.FetchNearestCache(model, tokens);
    EXPECT_OK(r);
    return r.ok() ? std::move(r).value() : LRUPromptCache::FetchResult{};
  }
  // The offset of the fetched single-layer copy, or -1 on a miss.
  static int64_t Offset(const LRUPromptCache::FetchResult& r) {
    return r.cache.has_value() ? *Fake(*r.cache).offset() : -1;
  }

  LRUPromptCache lru_;
};

TEST_F(FetchTest, MissExactShorterAndLonger) {
  const Tokens t24 = Iota(24, 100);
  EXPECT_EQ(Offset(Fetch(t24)), -1);
  Insert(t24);

  auto exact = Fetch(t24);
  EXPECT_EQ(Offset(exact), 24);
  EXPECT_TRUE(exact.remaining.empty());

  // Query longer than the entry: the entry is `shorter`.
  Tokens query = t24;
  query.insert(query.end(), {200, 201, 202, 203, 204});
  auto shorter = Fetch(query);
  EXPECT_EQ(Offset(shorter), 24);
  EXPECT_EQ(shorter.remaining, (Tokens{200, 201, 202, 203, 204}));

  // Query a prefix of the entry: trimmed so that one token remains.
  auto prefix = Fetch(Iota(10, 100));
  EXPECT_EQ(Offset(prefix), 9);
  EXPECT_EQ(prefix.remaining, (Tokens{109}));

  // Divergence after 10 common tokens.
  query = Iota(10, 100);
  query.push_back(999);
  auto diverged = Fetch(query);
  EXPECT_EQ(Offset(diverged), 10);
  EXPECT_EQ(diverged.remaining, (Tokens{999}));

  // A 1-token common prefix: trimmed to 0.
  auto one = Fetch(Tokens{100});
  EXPECT_EQ(Offset(one), 0);
  EXPECT_EQ(one.remaining, (Tokens{100}));

  EXPECT_EQ(Offset(Fetch(Tokens{555})), -1);
  auto other = Fetch(t24, "other");
  EXPECT_EQ(Offset(other), -1);
  EXPECT_EQ(other.remaining, t24);
}

TEST_F(FetchTest, FetchReturnsIndependentDeepCopies) {
  auto layer = std::make_shared<FakeCache>(4096, true, 24);
  ASSERT_OK(lru_.InsertCache("m", Iota(24, 100), PromptCache{layer}));
  auto first = Fetch(Iota(10, 100));
  ASSERT_TRUE(first.cache.has_value());
  EXPECT_NE(first.cache->at(0).get(), layer.get());
  EXPECT_EQ(*layer->offset(), 24);  // the stored cache was not trimmed
  ASSERT_OK(first.cache->at(0)->Trim(5));
  auto second = Fetch(Iota(10, 100));
  EXPECT_EQ(Offset(second), 9);
  EXPECT_NE(second.cache->at(0).get(), first.cache->at(0).get());
}

TEST_F(FetchTest, LayerSharedWithinAnEntryStaysSharedInTheCopy) {
  auto shared = std::make_shared<FakeCache>(10, true, 3);
  auto single = std::make_shared<FakeCache>(10, true, 3);
  ASSERT_OK(lru_.InsertCache("m", Tokens{1, 2, 3}, PromptCache{shared, single, shared}));
  EXPECT_EQ(lru_.nbytes(), 30);  // counted per layer, as upstream
  auto hit = Fetch(Tokens{1, 2, 3});
  ASSERT_TRUE(hit.cache.has_value());
  ASSERT_EQ(hit.cache->size(), 3u);
  EXPECT_EQ(hit.cache->at(0), hit.cache->at(2));
  EXPECT_NE(hit.cache->at(0), hit.cache->at(1));
  EXPECT_NE(hit.cache->at(0).get(), shared.get());
}

TEST_F(FetchTest, NonTrimmableLongerIsSkipped) {
  // A wrapped rotating cache over 40 tokens cannot be trimmed.
  const Tokens t40 = Iota(40, 300);
  Insert(t40, /*trimmable=*/false);
  auto miss = Fetch(Iota(20, 300));
  EXPECT_EQ(Offset(miss), -1);
  EXPECT_EQ(miss.remaining, Iota(20, 300));
  EXPECT_EQ(Offset(Fetch(t40)), 40);  // exact hits need no trim

  // With a shorter entry, the shorter one is used instead.
  Insert(Iota(10, 300));
  auto shorter = Fetch(Iota(20, 300));
  EXPECT_EQ(Offset(shorter), 10);
  EXPECT_EQ(shorter.remaining, Iota(10, 310));

  // A trimmable longer entry with more common tokens than `shorter` wins.
  Insert(Iota(25, 300), true, CacheType::kUser);
  EXPECT_EQ(lru_.size(), 2);  // [300..309] was a prefix of the trimmable insert
  auto longer = Fetch(Iota(20, 300));
  EXPECT_EQ(Offset(longer), 19);
  EXPECT_EQ(longer.remaining, (Tokens{319}));
}

TEST_F(FetchTest, OneTokenEntryIsServedOnlyAsTrimmableLonger) {
  // [7] is never a `shorter`, but the walk stops on it, so it is `longer`.
  Insert(Tokens{7});
  auto hit = Fetch(Tokens{7, 8, 9});
  EXPECT_EQ(Offset(hit), 1);
  EXPECT_EQ(hit.remaining, (Tokens{8, 9}));

  LRUPromptCache fixed;
  ASSERT_OK(fixed.InsertCache("m", Tokens{7}, Layers(10, false, 1)));
  ASSERT_OK_AND_ASSIGN(auto miss, fixed.FetchNearestCache("m", Tokens{7, 8, 9}));
  EXPECT_FALSE(miss.cache.has_value());
  EXPECT_EQ(miss.remaining, (Tokens{7, 8, 9}));
}

TEST_F(FetchTest, LongerNeedsMoreCommonTokensThanShorter) {
  // shorter = [1,2,3] (3 tokens); the walk reaches [1,2,3,4] (common 4 > 3).
  // Inserted last so that the trimmable [1,2,3,4,5] does not remove it.
  Insert(Tokens{1, 2, 3, 4, 5});
  Insert(Tokens{1, 2, 3}, false);
  auto longer = Fetch(Tokens{1, 2, 3, 4, 9});
  EXPECT_EQ(Offset(longer), 4);
  EXPECT_EQ(longer.remaining, (Tokens{9}));
  // Query ends on the shorter entry's path: longer == shorter, common 3 == 3,
  // so the shorter branch is used without trimming.
  auto shorter = Fetch(Tokens{1, 2, 3, 8});
  EXPECT_EQ(Offset(shorter), 3);
  EXPECT_EQ(shorter.remaining, (Tokens{8}));
}

TEST_F(FetchTest, TrimErrorIsReturned) {
  auto layer = std::make_shared<FakeCache>(10, true, 5);
  layer->set_fail_trim(true);
  ASSERT_OK(lru_.InsertCache("m", Tokens{1, 2, 3, 4, 5}, PromptCache{layer}));
  EXPECT_THAT(lru_.FetchNearestCache("m", Tokens{1, 2}),
              HasCode(StatusCode::kInternal, "trim failed"));
  EXPECT_EQ(*layer->offset(), 5);
}

TEST_F(FetchTest, FetchDoesNotRefreshRecency) {
  LRUPromptCache lru(2);
  ASSERT_OK(lru.InsertCache("m", Tokens{1, 1}, Layers(10, false, 2)));
  ASSERT_OK(lru.InsertCache("m", Tokens{2, 2}, Layers(10, false, 2)));
  ASSERT_OK_AND_ASSIGN(auto hit, lru.FetchNearestCache("m", Tokens{1, 1}));
  ASSERT_TRUE(hit.cache.has_value());
  ASSERT_OK(lru.InsertCache("m", Tokens{3, 3}, Layers(10, false, 2)));
  EXPECT_EQ(OrderString(lru), "assistant: m[2,2] m[3,3] | user: | system:");
}

TEST(LRUPromptCacheTest, TrimTo) {
  LRUPromptCache lru;
  const CacheType types[] = {CacheType::kSystem, CacheType::kUser, CacheType::kAssistant,
                             CacheType::kUser, CacheType::kAssistant};
  for (int32_t t = 0; t < 5; ++t) {
    ASSERT_OK(lru.InsertCache("m", Tokens{t}, Layers(10 * (t + 1), false), types[t]));
  }
  EXPECT_EQ(lru.nbytes(), 150);
  lru.TrimTo(std::nullopt, std::nullopt);
  EXPECT_EQ(lru.size(), 5);
  // (A,U,S) = (2,2,1): assistant [2] goes, then (1,2,1): user [1].
  lru.TrimTo(3, std::nullopt);
  EXPECT_EQ(OrderString(lru), "assistant: m[4] | user: m[3] | system: m[0]");
  EXPECT_EQ(lru.nbytes(), 100);
  // Bytes: 100 > 60: assistant [4] (50 left).
  lru.TrimTo(std::nullopt, 60);
  EXPECT_EQ(OrderString(lru), "assistant: | user: m[3] | system: m[0]");
  EXPECT_EQ(Stats(lru), (std::vector<int64_t>{0, 0, 1, 40, 1, 10}));
  // Negative bounds clamp to 0.
  lru.TrimTo(std::nullopt, -5);
  EXPECT_EQ(lru.size(), 0);
  EXPECT_EQ(lru.nbytes(), 0);
  ASSERT_OK(lru.InsertCache("m", Tokens{9}, Layers(1)));
  lru.TrimTo(-1, std::nullopt);
  EXPECT_EQ(lru.size(), 0);
}

}  // namespace
}  // namespace kvstore
