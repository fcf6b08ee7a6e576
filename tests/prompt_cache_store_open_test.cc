// PromptCacheStore::Open returns before the directory is indexed. Until
// the indexer is done, a fetch finds a prompt's entries by their file names
// and never serves a file that holds another key; what fetches drop and
// Puts write meanwhile is neither undone by the indexer nor lost from the
// manifest.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kvstore/prompt_cache_store.h"
#include "prompt_cache_store_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::CacheOf;
using ::kvstore::testing::kDir;
using ::kvstore::testing::Tokens;
using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

// Holds the indexer where it opens the manifest (it has listed the
// directory by then) until Release().
class HeldIndexerEnv : public FaultInjectionEnv {
 public:
  using FaultInjectionEnv::FaultInjectionEnv;
  Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override {
    if (path.ends_with("/MANIFEST")) {
      std::unique_lock<std::mutex> l(mu_);
      held_ = true;
      cv_.notify_all();
      cv_.wait(l, [&] { return released_; });
    }
    return FaultInjectionEnv::OpenReadable(path);
  }
  void WaitUntilHeld() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

class StoreOpenTest : public PromptCacheStoreTest {
 protected:
  // A store on `held_` whose indexer is held.
  std::unique_ptr<PromptCacheStore> OpenHeld() {
    Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(&held_, kDir, {});
    EXPECT_OK(store);
    held_.WaitUntilHeld();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  HeldIndexerEnv held_{env_.get()};
};

TEST_F(StoreOpenTest, ExactPrefixesAreServedBeforeTheDirectoryIsIndexed) {
  PutAll({{{1, 2}, 5}, {{1, 2, 3}, 7}, {{4, 5, 6}, 8}});
  std::unique_ptr<PromptCacheStore> store = OpenHeld();
  EXPECT_EQ(store->entries(), 0);
  std::string got;
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}, &got), 3);
  EXPECT_EQ(got, Want(3, 7));
  EXPECT_EQ(store->entries(), 2);  // both prefixes, found by name
  EXPECT_EQ(Fetch(*store, {4, 5, 6}, &got), 3);
  EXPECT_EQ(got, Want(3, 8));
  held_.Release();
  ASSERT_OK_AND_ASSIGN(StoreOpenReport report, store->WaitUntilIndexed());
  EXPECT_EQ(report.entries, 3);
  EXPECT_EQ(report.from_manifest, 0);  // every file was indexed by a fetch first
  EXPECT_TRUE(report.dropped.empty());
}

// Two files exchanged: found by name, each holds the other's key.
TEST_F(StoreOpenTest, AFileHoldingAnotherKeyIsNotServedBeforeTheDirectoryIsIndexed) {
  PutAll({{{1, 2, 3}, 7}, {{4, 5, 6}, 8}});
  Swap(FileOf({1, 2, 3}), FileOf({4, 5, 6}));
  std::unique_ptr<PromptCacheStore> store = OpenHeld();
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 9}), -1);
  EXPECT_EQ(Fetch(*store, {4, 5, 6, 9}), -1);
  held_.Release();
  ASSERT_OK(store->WaitUntilIndexed());
  // Their manifest lines agree with their names and sizes: caught at the load.
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 9}), -1);
  EXPECT_EQ(Fetch(*store, {4, 5, 6, 9}), -1);
  EXPECT_EQ(store->mismatched_dropped(), 2);
  EXPECT_EQ(store->entries(), 0);
}

// A fetch drops a corrupt file the indexer has listed but not reached: the
// indexer must not index it again from its listing and the manifest.
TEST_F(StoreOpenTest, AFileDroppedBeforeTheIndexerReachesItStaysDropped) {
  PutAll({{{1, 2, 3}, 7}, {{4, 5}, 8}});
  CorruptTensorByte(FileOf({1, 2, 3}));  // same size: its manifest line still applies
  std::unique_ptr<PromptCacheStore> store = OpenHeld();
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), -1);
  EXPECT_EQ(store->corrupt_dropped(), 1);
  held_.Release();
  ASSERT_OK_AND_ASSIGN(StoreOpenReport report, store->WaitUntilIndexed());
  EXPECT_EQ(report.entries, 1);
  EXPECT_TRUE(report.dropped.empty());  // gone, not dropped again
  EXPECT_EQ(report.manifest_ignored, 0);
  EXPECT_EQ(store->entries(), 1);
  EXPECT_EQ(Fetch(*store, {4, 5, 6}), 2);
}

// Puts while the indexer works: a new key and a replaced one are indexed,
// kept by the indexer, and in the manifest it writes.
TEST_F(StoreOpenTest, PutsBeforeTheDirectoryIsIndexedAreKeptAndLogged) {
  PutAll({{{1, 2, 3}, 7}, {{4, 5}, 8}});
  {
    std::unique_ptr<PromptCacheStore> store = OpenHeld();
    ASSERT_OK(store->Put("m", Tokens{7, 8}, CacheOf(2, 11)));
    ASSERT_OK(store->Put("m", Tokens{1, 2, 3}, CacheOf(3, 9)));
    held_.Release();
    ASSERT_OK_AND_ASSIGN(StoreOpenReport report, store->WaitUntilIndexed());
    EXPECT_EQ(report.entries, 3);
    std::string got;
    EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}, &got), 3);
    EXPECT_EQ(got, Want(3, 9));
  }
  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.entries, 3);
  EXPECT_EQ(report.from_manifest, 3);
  std::string got;
  EXPECT_EQ(Fetch(*store, {7, 8, 9}, &got), 2);
  EXPECT_EQ(got, Want(2, 11));
}

// The manifest cannot be rewritten (its rename fails): the error is the
// indexer's, and the lines logged since Open are appended to the old
// manifest when the store closes, so the next Open still uses it.
TEST_F(StoreOpenTest, LinesLoggedSinceOpenSurviveAManifestThatCannotBeRewritten) {
  PutAll({{{1, 2, 3}, 7}});
  {
    std::unique_ptr<PromptCacheStore> store = OpenHeld();
    ASSERT_OK(store->Put("m", Tokens{7, 8}, CacheOf(2, 11)));
    held_.FailNth(FaultInjectionEnv::Op::kRename, 1);
    held_.Release();
    EXPECT_THAT(store->WaitUntilIndexed(), testing::HasCode(StatusCode::kIOError, "injected"));
    ASSERT_OK(store->Put("m", Tokens{4, 5}, CacheOf(2, 12)));
    EXPECT_EQ(Fetch(*store, {1, 2, 3}), 3);
  }
  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.entries, 3);
  EXPECT_EQ(report.from_manifest, 3);
  EXPECT_EQ(report.manifest_ignored, 0);
}

// Temp files of dead writers are removed; this process's are a Put that
// runs while the indexer works, and are kept.
TEST_F(StoreOpenTest, TempFilesOfThisProcessAreKept) {
  PutAll({{{1, 2, 3}, 7}});
  // Named as a Put names them: "<16 hex digits>.safetensors.kvtmp-<pid>-put<n>".
  const std::string own = "0123456789abcdef.safetensors.kvtmp-" + std::to_string(env_->ProcessId()) + "-put0";
  const std::string dead = "0123456789abcdef.safetensors.kvtmp-2000000000-put0";  // above any pid limit
  for (const std::string& name : {own, dead}) {
    ASSERT_OK(WriteStringAtomic(env_.get(), Path(name), testing::Bytes("partial")));
  }
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_TRUE(env_->FileExists(Path(own)));
  EXPECT_FALSE(env_->FileExists(Path(dead)));
  // Not the store's pattern: another program's output being written here.
  const std::string other = "notes.txt.kvtmp-" + std::to_string(env_->ProcessId() + 1) + "-0";
  ASSERT_OK(WriteStringAtomic(env_.get(), Path(other), testing::Bytes("partial")));
  store.reset();
  store = OpenStore();
  EXPECT_TRUE(env_->FileExists(Path(other)));
}

// Closing while the indexer waits: it stops without indexing, and the
// lines logged meanwhile still reach the manifest.
TEST_F(StoreOpenTest, ClosingBeforeTheDirectoryIsIndexedKeepsLoggedLines) {
  PutAll({{{1, 2, 3}, 7}});
  std::unique_ptr<PromptCacheStore> store = OpenHeld();
  ASSERT_OK(store->Put("m", Tokens{7, 8}, CacheOf(2, 11)));
  std::thread closer([&] { store.reset(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the closer is waiting for the indexer
  held_.Release();
  closer.join();
  StoreOpenReport report;
  store = OpenStore(&report);
  EXPECT_EQ(report.entries, 2);
  EXPECT_EQ(report.from_manifest, 2);
}

}  // namespace
}  // namespace kvstore
