// PromptCacheStore: the disk tier serves the longest stored prefix within
// its budget, from many threads, and loses no entry to a failed write or read.
#include "kvstore/prompt_cache_store.h"

#include <thread>

#include "prompt_cache_store_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::CacheOf;
using ::kvstore::testing::Fingerprint;
using ::kvstore::testing::kDir;
using ::kvstore::testing::Tokens;
using ::kvstore::testing::UnreadableEnv;
using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

TEST_F(PromptCacheStoreTest, ServesTheLongestStoredPrefixOfTheSameModel) {
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  ASSERT_OK(store->Put("m", Tokens{1}, CacheOf(1, 1)));
  ASSERT_OK(store->Put("m", Tokens{1, 2, 3}, CacheOf(3, 2)));
  ASSERT_OK(store->Put("other", Tokens{1, 2}, CacheOf(2, 3)));
  std::string got;
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}, &got), 3);
  EXPECT_EQ(got, Want(3, 2));
  EXPECT_EQ(Fetch(*store, {1, 2, 3}), 3);  // the whole query counts
  EXPECT_EQ(Fetch(*store, {1, 2}, &got), 1);
  EXPECT_EQ(got, Want(1, 1));
  EXPECT_EQ(Fetch(*store, {2, 1}), -1);
  EXPECT_EQ(Fetch(*store, {}), -1);
  EXPECT_EQ(store->entries(), 3);
}

TEST_F(PromptCacheStoreTest, CorruptFileIsAMissAndRemoved) {
  PutAll({{{1, 2, 3}, 7}});
  const std::string name = FileOf({1, 2, 3});
  CorruptTensorByte(name);

  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), -1);
  EXPECT_EQ(store->corrupt_dropped(), 1);
  EXPECT_EQ(store->entries(), 0);
  EXPECT_FALSE(env_->FileExists(Path(name)));
  // Reported once, with why, for a caller that logs it.
  const std::vector<std::string> dropped = store->TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_TRUE(dropped[0].starts_with(name + ": ")) << dropped[0];
  EXPECT_TRUE(store->TakeDropped().empty());
}

// Files the indexer removes are reported too; past 64, only counted.
TEST_F(PromptCacheStoreTest, DroppedFilesAreReportedOnceAndBounded) {
  PutAll({});  // creates the directory
  const std::vector<std::byte> junk(16, std::byte{'x'});
  for (int i = 0; i < 70; ++i) ASSERT_OK(WriteStringAtomic(env_.get(), Path("bad" + std::to_string(i) + ".safetensors"), junk));
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  const std::vector<std::string> dropped = store->TakeDropped();
  ASSERT_EQ(dropped.size(), 65u);
  EXPECT_TRUE(dropped[0].starts_with("bad")) << dropped[0];
  EXPECT_EQ(dropped.back(), "and 6 more");
  EXPECT_TRUE(store->TakeDropped().empty());
}

// Fails reads of one path with an I/O error.
// A read that fails for an I/O error is a miss that keeps the entry.
TEST_F(PromptCacheStoreTest, UnreadableFileIsSkippedButKept) {
  PutAll({{{1, 2}, 5}, {{1, 2, 3}, 7}});
  UnreadableEnv env(env_.get());
  Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(&env, kDir, {});
  ASSERT_OK(store);
  ASSERT_OK((*store)->WaitUntilIndexed());
  env.unreadable = Path(FileOf({1, 2, 3}));
  EXPECT_EQ(Fetch(**store, {1, 2, 3, 4}), 2);
  EXPECT_EQ((*store)->entries(), 2);
  EXPECT_EQ((*store)->corrupt_dropped(), 0);
  env.unreadable.clear();
  EXPECT_EQ(Fetch(**store, {1, 2, 3, 4}), 3);
}

// At open, a file whose header cannot be read is neither indexed nor removed.
TEST_F(PromptCacheStoreTest, UnreadableFileAtOpenIsLeftInPlace) {
  PutAll({{{1, 2, 3}, 7}});
  ASSERT_OK(env_->RemoveFile(Path("MANIFEST")));  // so that the header is read
  UnreadableEnv env(env_.get());
  env.unreadable = Path(FileOf({1, 2, 3}));
  {
    StoreOpenReport report;
    Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(&env, kDir, {}, &report);
    ASSERT_OK(store);
    EXPECT_EQ((*store)->entries(), 0);
    ASSERT_EQ(report.dropped.size(), 1u);
    EXPECT_THAT(report.dropped[0], ::testing::EndsWith("injected read error (left in place)"));
  }
  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.entries, 1);
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), 3);
}

TEST_F(PromptCacheStoreTest, ForeignFilesAreDroppedAtOpenAndOthersLeftAlone) {
  PutAll({{{1, 2, 3}, 7}});
  ASSERT_OK(SavePromptCache(env_.get(), Path("plain.safetensors"), CacheOf(2, 1), {{"kvstore_model", "m"}}));
  ASSERT_OK(WriteStringAtomic(env_.get(), Path("notes.txt"), testing::Bytes("hello")));
  ASSERT_OK(WriteStringAtomic(env_.get(), Path("junk.safetensors"), testing::Bytes("not a file")));
  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.entries, 1);
  std::vector<std::string> dropped = report.dropped;
  std::sort(dropped.begin(), dropped.end());
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_THAT(dropped[0], ::testing::StartsWith("junk.safetensors: ResourceExhausted: /store/junk.safetensors: safetensors H2"));
  EXPECT_EQ(dropped[1], "plain.safetensors: Corruption: not a store entry: no valid model/tokens keys");
  EXPECT_TRUE(env_->FileExists(Path("notes.txt")));
  EXPECT_EQ(store->mismatched_dropped(), 0);
}

// A writer killed mid-write leaves temp files; the next Open removes those
// of the store's own writes whose process is gone (pid 2000000000 is above
// every system's pid limit), counts them, and leaves those of live
// processes (pid 1: another server sharing the directory) and other
// programs' alone (a kvtool output being written into the directory).
TEST_F(PromptCacheStoreTest, OwnTempFilesAreRemovedAtOpenOthersKept) {
  PutAll({{{1, 2, 3}, 7}});
  const std::string entry = FileOf({1, 2, 3});
  const std::string dead = "2000000000";
  const std::vector<std::string> own = {entry + ".kvtmp-" + dead + "-put0",
                                        entry + ".kvtmp-" + dead + "-put0.kvtmp-" + dead + "-3",
                                        "0123456789abcdef.safetensors.kvtmp-" + dead + "-0",
                                        "kvstore-models.json.kvtmp-" + dead + "-models"};
  const std::vector<std::string> foreign = {"out.safetensors.kvtmp-77-0", "notes.txt.kvtmp-77-1",
                                            "0123456789ABCDEF.safetensors.kvtmp-1-0",
                                            "0123456789abcdef.safetensors.kvtmp-1-put0"};
  for (const std::string& name : own) ASSERT_OK(WriteStringAtomic(env_.get(), Path(name), testing::Bytes("x")));
  for (const std::string& name : foreign) ASSERT_OK(WriteStringAtomic(env_.get(), Path(name), testing::Bytes("x")));
  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.entries, 1);
  EXPECT_EQ(report.temp_files_removed, 4);
  for (const std::string& name : own) EXPECT_FALSE(env_->FileExists(Path(name))) << name;
  for (const std::string& name : foreign) EXPECT_TRUE(env_->FileExists(Path(name))) << name;
  EXPECT_EQ(Fetch(*store, {1, 2, 3}), 3);
}

TEST_F(PromptCacheStoreTest, FailedPutKeepsTheOldEntry) {
  PutAll({{{1, 2, 3}, 7}});
  FaultInjectionEnv env(env_.get());
  Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(&env, kDir, {});
  ASSERT_OK(store);
  ASSERT_OK((*store)->WaitUntilIndexed());
  env.FailNth(FaultInjectionEnv::Op::kRename, 1);
  EXPECT_THAT((*store)->Put("m", Tokens{1, 2, 3}, CacheOf(3, 8)), testing::HasCode(StatusCode::kIOError, "injected"));
  std::string got;
  EXPECT_EQ(Fetch(**store, {1, 2, 3, 4}, &got), 3);
  EXPECT_EQ(got, Want(3, 7));
  EXPECT_THAT((*store)->Put("m", Tokens{}, CacheOf(3, 8)), testing::HasCode(StatusCode::kInvalidArgument, "empty"));
  EXPECT_EQ((*store)->entries(), 1);
}

TEST_F(PromptCacheStoreTest, ReopenIndexesFromTheManifest) {
  PutAll({{{1}, 1}, {{1, 2}, 2}, {{3, 4, 5}, 3}});
  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.entries, 3);
  EXPECT_EQ(report.from_manifest, 3);
  EXPECT_TRUE(report.dropped.empty());
  std::string got;
  EXPECT_EQ(Fetch(*store, {3, 4, 5, 6}, &got), 3);
  EXPECT_EQ(got, Want(3, 3));
}

TEST_F(PromptCacheStoreTest, EvictsTheLeastRecentlyUsedOverBudget) {
  int64_t one = 0;
  {
    std::unique_ptr<PromptCacheStore> probe = OpenStore();
    ASSERT_OK(probe->Put("m", Tokens{100}, CacheOf(1, 1)));
    one = probe->bytes();
  }
  ASSERT_OK(env_->RemoveFile(Path(FileOf({100}))));
  ASSERT_OK(env_->RemoveFile(Path("MANIFEST")));
  std::unique_ptr<PromptCacheStore> store = OpenStore(nullptr, 2 * one + one / 2);
  ASSERT_OK(store->Put("m", Tokens{101}, CacheOf(1, 1)));
  ASSERT_OK(store->Put("m", Tokens{102}, CacheOf(1, 2)));
  EXPECT_EQ(Fetch(*store, {101, 0}), 1);  // 101 becomes the most recent
  ASSERT_OK(store->Put("m", Tokens{103}, CacheOf(1, 3)));
  EXPECT_EQ(store->entries(), 2);
  EXPECT_EQ(Fetch(*store, {102, 0}), -1);
  EXPECT_EQ(Fetch(*store, {101, 0}), 1);
  EXPECT_EQ(Fetch(*store, {103, 0}), 1);
  EXPECT_LE(store->bytes(), 2 * one + one / 2);
}

TEST_F(PromptCacheStoreTest, ConcurrentPutsAndFetchesServeOnlyTheirOwnKeys) {
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const Tokens key = {t, i % 5};
        const uint64_t seed = static_cast<uint64_t>(t * 10 + i % 5);
        EXPECT_OK(store->Put("m", key, CacheOf(2, seed)));
        auto hit = store->FetchLongestPrefix("m", Tokens{t, i % 5, 99});
        ASSERT_OK(hit);
        ASSERT_TRUE(hit->has_value());
        EXPECT_EQ((*hit)->length, 2);
        EXPECT_EQ(Fingerprint(*(*hit)->cache[0]), Want(2, seed));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(store->entries(), 20);
}

}  // namespace
}  // namespace kvstore
