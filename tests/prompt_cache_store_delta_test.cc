// PromptCacheStore's delta entries: entries that share a prefix share its
// bytes, and a delta entry is served only with the base it was written on.
#include <algorithm>
#include <atomic>
#include <thread>

#include "kvstore/prompt_cache_store.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/tiers/store_format.h"
#include "prompt_cache_store_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::CacheOf;
using ::kvstore::testing::Tokens;
using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

// Tokens 1..n.
Tokens FirstN(int32_t n) {
  Tokens t;
  for (int32_t i = 1; i <= n; ++i) t.push_back(i);
  return t;
}

Tokens With(Tokens t, int32_t token) {
  t.push_back(token);
  return t;
}

// Tokens 1..n, then `tail` more from `first` on (another conversation
// sharing the first n tokens).
Tokens Branch(int32_t n, int32_t first, int32_t tail) {
  Tokens t = FirstN(n);
  for (int32_t i = 0; i < tail; ++i) t.push_back(first + i);
  return t;
}

// The cache of tokens that share their first `n` with `head`'s: its rows
// [0, n), then `tail` rows of CacheOf(tail, seed), as a model computes the
// same KV for the same prefix.
PromptCache Joined(const PromptCache& head, int64_t n, int64_t tail, uint64_t seed) {
  Result<CacheState> h = head[0]->State();
  Result<CacheState> t = CacheOf(tail, seed)[0]->State();
  EXPECT_OK(h);
  EXPECT_OK(t);
  auto kv = std::make_shared<KVCache>();
  EXPECT_OK(kv->UpdateAndFetch((*h)[0].array().Slice(2, 0, n), (*h)[1].array().Slice(2, 0, n)));
  EXPECT_OK(kv->UpdateAndFetch((*t)[0].array(), (*t)[1].array()));
  return {kv};
}

std::string FingerprintOf(const PromptCache& cache) { return ::kvstore::testing::Fingerprint(*cache[0]); }

class StoreDeltaTest : public PromptCacheStoreTest {
 protected:
  // The store file of `tokens`' base, or "" for a whole entry.
  std::string BaseOf(const Tokens& tokens) {
    Result<PromptCacheInfo> info = ReadPromptCacheInfo(env_.get(), Path(FileOf(tokens)));
    EXPECT_OK(info);
    if (!info.ok()) return "";
    Result<std::optional<StoreBase>> base = StoreBaseFromMetadata(info->user_metadata);
    EXPECT_OK(base);
    return base.ok() && *base ? (*base)->file : "";
  }
  // The delta entries in the directory.
  int DeltaEntries() {
    Result<std::vector<std::string>> names = env_->GetChildren(::kvstore::testing::kDir);
    EXPECT_OK(names);
    int n = 0;
    for (const std::string& name : names.ok() ? *names : std::vector<std::string>()) {
      if (!IsStoreEntryFileName(name)) continue;
      Result<PromptCacheInfo> info = ReadPromptCacheInfo(env_.get(), Path(name));
      if (info.ok() && FindUserKey(info->user_metadata, kStoreBaseKey)) ++n;
    }
    return n;
  }
  // A store holding a_ (a whole entry) and b_ (a delta entry on it).
  std::unique_ptr<PromptCacheStore> StoreWithBaseAndDelta() {
    std::unique_ptr<PromptCacheStore> store = OpenStore();
    EXPECT_OK(store->Put("m", a_, cache_a_));
    EXPECT_OK(store->Put("m", b_, cache_b_));
    return store;
  }
  int64_t FileBytes(const Tokens& tokens) {
    Result<uint64_t> size = env_->GetFileSize(Path(FileOf(tokens)));
    EXPECT_OK(size);
    return size.ok() ? static_cast<int64_t>(*size) : 0;
  }

  const Tokens a_ = FirstN(100);
  const Tokens b_ = Branch(60, 500, 40);  // shares 60 tokens with a_
  const PromptCache cache_a_ = CacheOf(100, 7);
  const PromptCache cache_b_ = Joined(cache_a_, 60, 40, 9);
};

TEST_F(StoreDeltaTest, ASharedPrefixIsStoredOnceAndServedJoined) {
  std::unique_ptr<PromptCacheStore> store = StoreWithBaseAndDelta();
  EXPECT_EQ(BaseOf(a_), "");
  EXPECT_EQ(BaseOf(b_), FileOf(a_));
  // b_ holds its 40 rows only.
  EXPECT_LT(FileBytes(b_), FileBytes(a_) / 2);
  std::string got;
  EXPECT_EQ(Fetch(*store, With(b_, 999), &got), 100);
  EXPECT_EQ(got, FingerprintOf(cache_b_));
  EXPECT_EQ(Fetch(*store, With(a_, 999), &got), 100);
  EXPECT_EQ(got, FingerprintOf(cache_a_));
  // Trimmed, as any longer entry: 80 tokens of b_.
  EXPECT_EQ(Fetch(*store, With(Tokens(b_.begin(), b_.begin() + 80), 999), &got), 80);
  PromptCache trimmed = Joined(cache_a_, 60, 40, 9);
  ASSERT_OK(trimmed[0]->Trim(20));
  EXPECT_EQ(got, FingerprintOf(trimmed));
  EXPECT_EQ(store->corrupt_dropped() + store->mismatched_dropped(), 0);
}

TEST_F(StoreDeltaTest, AReopenedStoreServesDeltaEntriesFromTheManifestAndFromHeaders) {
  StoreWithBaseAndDelta().reset();
  EXPECT_NE(Manifest().find(" " + FileOf(a_) + "\n"), std::string::npos) << Manifest();
  for (bool with_manifest : {true, false}) {
    SCOPED_TRACE(with_manifest);
    if (!with_manifest) {
      ASSERT_OK(env_->RemoveFile(Path("MANIFEST")));
    }
    StoreOpenReport report;
    std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
    EXPECT_EQ(report.from_manifest, with_manifest ? 2 : 0);
    std::string got;
    EXPECT_EQ(Fetch(*store, With(b_, 999), &got), 100);
    EXPECT_EQ(got, FingerprintOf(cache_b_));
  }
}

// A base this store has not indexed (still indexing the directory at a
// restart; here a manifest line lost) is loaded by its name.
TEST_F(StoreDeltaTest, ABaseNotYetIndexedIsLoadedByItsName) {
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  {
    std::unique_ptr<PromptCacheStore> other = OpenStore();  // another server on the directory
    ASSERT_OK(other->Put("m", a_, cache_a_));
    ASSERT_OK(other->Put("m", b_, cache_b_));
  }
  std::string manifest = Manifest();
  const size_t line = manifest.find("+ " + FileOf(a_));
  ASSERT_NE(line, std::string::npos);
  manifest.erase(line, manifest.find('\n', line) + 1 - line);
  SetManifest(manifest);
  std::string got;
  EXPECT_EQ(Fetch(*store, With(b_, 999), &got), 100);
  EXPECT_EQ(got, FingerprintOf(cache_b_));
  EXPECT_EQ(store->entries(), 1);  // the delta entry, from its line
}

TEST_F(StoreDeltaTest, ADeltaEntryWhoseBaseIsGoneIsACountedMiss) {
  std::unique_ptr<PromptCacheStore> store = StoreWithBaseAndDelta();
  const std::string delta = FileOf(b_);
  ASSERT_OK(env_->RemoveFile(Path(FileOf(a_))));  // as another process's eviction would
  EXPECT_EQ(Fetch(*store, With(b_, 999)), -1);
  EXPECT_EQ(store->mismatched_dropped(), 1);
  EXPECT_FALSE(env_->FileExists(Path(delta)));
  const std::vector<std::string> dropped = store->TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("its base"), std::string::npos) << dropped[0];
}

// As for a whole entry, a read error (maybe transient) is a miss that
// keeps the entry: here the base's.
TEST_F(StoreDeltaTest, ABaseThatCannotBeReadIsAMissThatKeepsTheDeltaEntry) {
  StoreWithBaseAndDelta().reset();
  ::kvstore::testing::UnreadableEnv env(env_.get());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PromptCacheStore> store,
                       PromptCacheStore::Open(&env, ::kvstore::testing::kDir, PromptCacheStoreOptions{}));
  ASSERT_OK(store->WaitUntilIndexed());
  env.unreadable = Path(FileOf(a_));
  EXPECT_EQ(Fetch(*store, With(b_, 999)), -1);
  EXPECT_EQ(store->entries(), 2);
  EXPECT_EQ(store->corrupt_dropped() + store->mismatched_dropped(), 0);
  env.unreadable.clear();
  std::string got;
  EXPECT_EQ(Fetch(*store, With(b_, 999), &got), 100);
  EXPECT_EQ(got, FingerprintOf(cache_b_));
}

// A corrupt base is dropped (as a corrupt entry), with the delta entry that
// needed it; the next Put sharing its prefix is whole.
TEST_F(StoreDeltaTest, ACorruptBaseIsDroppedWithItsDeltaEntry) {
  std::unique_ptr<PromptCacheStore> store = StoreWithBaseAndDelta();
  const std::string base = FileOf(a_), delta = FileOf(b_);
  CorruptTensorByte(base);
  EXPECT_EQ(Fetch(*store, With(b_, 999)), -1);
  EXPECT_EQ(store->corrupt_dropped(), 1);
  EXPECT_EQ(store->mismatched_dropped(), 1);
  EXPECT_FALSE(env_->FileExists(Path(base)));
  EXPECT_FALSE(env_->FileExists(Path(delta)));
  EXPECT_EQ(store->entries(), 0);
  ASSERT_OK(store->Put("m", b_, cache_b_));
  EXPECT_EQ(BaseOf(b_), "");
  std::string got;
  EXPECT_EQ(Fetch(*store, With(b_, 999), &got), 100);
  EXPECT_EQ(got, FingerprintOf(cache_b_));
}

TEST_F(StoreDeltaTest, ABaseReplacedByAnotherKeysFileIsRefused) {
  std::unique_ptr<PromptCacheStore> store = StoreWithBaseAndDelta();
  const Tokens other = Branch(10, 700, 90);  // shares too little to be a base
  ASSERT_OK(store->Put("m", other, CacheOf(100, 11)));
  ASSERT_EQ(BaseOf(other), "");
  // The base's name now holds another key's file: never joined.
  ASSERT_OK(env_->RenameFile(Path(FileOf(other)), Path(FileOf(a_))));
  EXPECT_EQ(Fetch(*store, With(b_, 999)), -1);
  EXPECT_EQ(store->mismatched_dropped(), 1);
  const std::vector<std::string> dropped = store->TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("does not hold the tokens shared"), std::string::npos) << dropped[0];
}

TEST_F(StoreDeltaTest, ABaseIsNotSupersededWhileADeltaEntryNeedsIt) {
  std::unique_ptr<PromptCacheStore> store = StoreWithBaseAndDelta();
  // a_ + 50 tokens: a_ is its prefix, but b_ is based on it, so it stays
  // and the longer entry is a delta on it too.
  const Tokens longer = Branch(100, 900, 50);
  const PromptCache cache_longer = Joined(cache_a_, 100, 50, 13);
  ASSERT_OK(store->Put("m", longer, cache_longer));
  EXPECT_EQ(store->entries(), 3);
  EXPECT_EQ(store->prefixes_superseded(), 0);
  EXPECT_EQ(BaseOf(longer), FileOf(a_));
  std::string got;
  EXPECT_EQ(Fetch(*store, With(b_, 999), &got), 100);
  EXPECT_EQ(got, FingerprintOf(cache_b_));
  EXPECT_EQ(Fetch(*store, With(longer, 999), &got), 150);
  EXPECT_EQ(got, FingerprintOf(cache_longer));
  // The next turn of b_'s conversation supersedes b_ (a delta entry, no
  // base) and is a delta on a_ in its place.
  const Tokens next = Branch(60, 500, 70);
  ASSERT_OK(store->Put("m", next, Joined(cache_b_, 100, 30, 15)));
  EXPECT_EQ(store->prefixes_superseded(), 1);
  EXPECT_EQ(store->entries(), 3);
  EXPECT_EQ(BaseOf(next), FileOf(a_));
}

TEST_F(StoreDeltaTest, AConversationThatOnlyGrowsStaysOneWholeFile) {
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  ASSERT_OK(store->Put("m", a_, cache_a_));
  const Tokens longer = Branch(100, 900, 50);
  ASSERT_OK(store->Put("m", longer, Joined(cache_a_, 100, 50, 13)));
  EXPECT_EQ(store->entries(), 1);
  EXPECT_EQ(store->prefixes_superseded(), 1);
  EXPECT_EQ(BaseOf(longer), "");
}

TEST_F(StoreDeltaTest, EvictionNeverLeavesADeltaEntryWithoutItsBase) {
  std::unique_ptr<PromptCacheStore> probe = OpenStore();
  ASSERT_OK(probe->Put("m", a_, cache_a_));
  const int64_t whole = probe->bytes();
  probe.reset();
  ASSERT_OK(env_->RemoveFile(Path(FileOf(a_))));
  ASSERT_OK(env_->RemoveFile(Path("MANIFEST")));
  // Room for a_, b_ and a little: each unrelated entry evicts something.
  std::unique_ptr<PromptCacheStore> store = OpenStore(nullptr, whole * 3 / 2 + whole / 10);
  ASSERT_OK(store->Put("m", a_, cache_a_));
  ASSERT_OK(store->Put("m", b_, cache_b_));
  const std::string base = FileOf(a_), delta = FileOf(b_);
  for (int32_t i = 0; i < 3; ++i) {
    ASSERT_OK(store->Put("m", Branch(0, 2000 + 1000 * i, 100), CacheOf(100, 20 + i)));
    EXPECT_TRUE(!env_->FileExists(Path(delta)) || env_->FileExists(Path(base))) << i;
    EXPECT_LE(store->bytes(), whole * 3 / 2 + whole / 10);
  }
  EXPECT_FALSE(env_->FileExists(Path(delta)));
}

// Threads putting and fetching branches of one conversation under a budget
// that evicts all the time: a hit is always the KV of the tokens asked
// (whichever base and delta entries it was joined from), never a torn or
// foreign join. Under TSan in scripts/test.sh --tsan.
TEST_F(StoreDeltaTest, ConcurrentBranchesUnderEvictionServeOnlyTheirOwnKV) {
  constexpr int kThreads = 4, kRounds = 12;
  const PromptCache trunk = CacheOf(160, 7);  // the KV of tokens 1..160
  // Branch (thread t, round r): tokens 1..n then 40 of its own; its KV is
  // the trunk's first n rows and rows of seed 100 t + r.
  auto branch_n = [](int t, int r) { return static_cast<int32_t>(32 + 16 * ((t + r) % 8)); };
  auto branch = [&](int t, int r) { return Branch(branch_n(t, r), 10000 * (t + 1) + 100 * r, 40); };
  auto branch_cache = [&](int t, int r) { return Joined(trunk, branch_n(t, r), 40, 100 * t + r); };
  std::unique_ptr<PromptCacheStore> probe = OpenStore();
  ASSERT_OK(probe->Put("m", FirstN(160), trunk));
  const int64_t whole = probe->bytes();
  probe.reset();
  std::unique_ptr<PromptCacheStore> store = OpenStore(nullptr, whole * 3);
  std::atomic<int> hits{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        if (r % 3 == 0) (void)store->Put("m", FirstN(160), trunk);
        if (!store->Put("m", branch(t, r), branch_cache(t, r)).ok()) ++wrong;
        for (int back = 0; back <= std::min(r, 2); ++back) {
          const Tokens key = branch(t, r - back);
          Result<std::optional<PromptCacheStore::Hit>> hit = store->FetchLongestPrefix("m", With(key, -1));
          if (!hit.ok()) {
            ++wrong;
            continue;
          }
          if (!hit->has_value()) continue;
          // Whatever length was served, it is the KV of those tokens.
          PromptCache want = branch_cache(t, r - back);
          const int64_t length = (*hit)->length;
          if (length > static_cast<int64_t>(key.size()) || !want[0]->Trim(static_cast<int64_t>(key.size()) - length).ok() ||
              FingerprintOf(want) != FingerprintOf((*hit)->cache)) {
            ++wrong;
          }
          ++hits;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), kThreads * kRounds);  // most fetches hit
  EXPECT_EQ(store->corrupt_dropped(), 0);
  EXPECT_GT(DeltaEntries(), 0);
  EXPECT_LT(store->entries(), kThreads * kRounds);  // the budget evicted
}

TEST_F(StoreDeltaTest, ModelsWhoseStateIsNotRowsAndStoresWithoutSharingWriteWholeEntries) {
  // A RotatingKVCache's state at a token count is not a slice of a longer one.
  auto rotating = [](int64_t tokens, uint64_t seed) {
    auto c = std::make_shared<RotatingKVCache>(256);
    PromptCache whole = CacheOf(tokens, seed);
    Result<CacheState> s = whole[0]->State();
    EXPECT_OK(s);
    EXPECT_OK(c->UpdateAndFetch((*s)[0].array(), (*s)[1].array()));
    return PromptCache{c};
  };
  {
    std::unique_ptr<PromptCacheStore> store = OpenStore();
    ASSERT_OK(store->Put("m", a_, rotating(100, 7)));
    ASSERT_OK(store->Put("m", b_, rotating(100, 9)));
    EXPECT_EQ(BaseOf(b_), "");
  }
  ASSERT_OK(env_->RemoveFile(Path(FileOf(b_))));
  PromptCacheStoreOptions options;
  options.share_prefixes = false;
  std::unique_ptr<PromptCacheStore> store = OpenStoreWith(options);
  ASSERT_OK(store->Put("m", a_, cache_a_));
  ASSERT_OK(store->Put("m", b_, cache_b_));
  EXPECT_EQ(BaseOf(b_), "");
}

TEST_F(StoreDeltaTest, AMalformedBaseIsDroppedAtOpen) {
  {
    std::unique_ptr<PromptCacheStore> store = OpenStore();
    ASSERT_OK(store->Put("m", a_, cache_a_));
  }
  for (const char* bad : {"nothex.safetensors 10", "0123456789abcdef.safetensors 0", "0123456789abcdef.safetensors",
                          "0123456789abcdef.safetensors x"}) {
    Metadata metadata = StoreKeyMetadata("m", b_);
    metadata.emplace_back(std::string(kStoreBaseKey), bad);
    SavePromptCacheOptions save;
    save.digest = DigestAlgorithm::kXxh3_128;
    ASSERT_OK(SavePromptCache(env_.get(), Path(StoreFileName("m", b_)), CacheOf(40, 3), metadata, save));
    StoreOpenReport report;
    std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
    ASSERT_EQ(report.dropped.size(), 1u) << bad;
    EXPECT_NE(report.dropped[0].find("malformed kvstore_base"), std::string::npos) << report.dropped[0];
    EXPECT_NE(Fetch(*store, With(b_, 999)), 100);
  }
}

}  // namespace
}  // namespace kvstore
