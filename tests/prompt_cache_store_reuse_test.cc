// PromptCacheStore: what a fetch checks in a loaded entry beyond its
// digests, and entries replaced while they are being dropped.
#include "kvstore/prompt_cache_store.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "libkvstore/reuse/store_format.h"
#include "prompt_cache_store_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::CacheOf;
using ::kvstore::testing::Tokens;
using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

// A well-formed, sealed file (another writer's) whose key names 4 tokens
// but whose layer holds 2: dropped as corrupt, never served as 4 tokens.
TEST_F(PromptCacheStoreTest, EntryHoldingFewerTokensThanItsKeyIsDropped) {
  const Tokens key = {1, 2, 3, 4};
  EXPECT_THAT(OpenStore()->Put("m", key, CacheOf(2, 7)),
              ::kvstore::testing::HasCode(StatusCode::kInvalidArgument, "layer 0 (KVCache): offset 2 != 4 tokens"));
  ASSERT_OK(env_->CreateDir(kvstore::testing::kDir));
  const std::string file = StoreFileName("m", key);
  SavePromptCacheOptions options;
  options.layout = PromptCacheLayout::kMlxLm;
  ASSERT_OK(SavePromptCache(env_.get(), Path(file), CacheOf(2, 7), StoreKeyMetadata("m", key), options));
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(store->entries(), 1);
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4, 5}), -1);
  EXPECT_EQ(store->corrupt_dropped(), 1);
  EXPECT_EQ(store->entries(), 0);
  EXPECT_FALSE(env_->FileExists(Path(file)));
}

// Runs a hook once, right after a path is opened for reading or renamed onto.
class HookEnv : public FaultInjectionEnv {
 public:
  using FaultInjectionEnv::FaultInjectionEnv;
  struct Hook {
    std::string path;
    std::function<void()> fn;
  };
  Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override {
    Result<std::shared_ptr<const ReadableFile>> file = FaultInjectionEnv::OpenReadable(path);
    Fire(after_open, path);
    return file;
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    Status s = FaultInjectionEnv::RenameFile(from, to);
    Fire(after_rename, to);
    return s;
  }
  Hook after_open, after_rename;

 private:
  static void Fire(Hook& hook, const std::string& path) {
    if (path == hook.path && hook.fn) std::exchange(hook.fn, nullptr)();
  }
};

// A fetch loads the old, corrupt file of a key while a Put replaces it.
// The fetch's Drop of the old entry must not remove the new file in the
// window between the Put's rename and its index update: the Put renames
// and indexes under the store's lock, so the Drop runs after the update
// and sees a newer generation. (Before, it removed the new file and the
// Put then indexed a missing one.) The Put waits in the window for the
// fetch to end, at most 300 ms: with the lock held it cannot end earlier.
TEST_F(PromptCacheStoreTest, DropOfAReplacedEntryKeepsTheNewFile) {
  PutAll({{{1, 2, 3}, 7}});
  const std::string name = FileOf({1, 2, 3});
  CorruptTensorByte(name);
  HookEnv env(env_.get());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PromptCacheStore> store,
                       PromptCacheStore::Open(&env, kvstore::testing::kDir, {}));

  std::mutex mu;
  std::condition_variable cv;
  bool renamed = false, fetched = false;
  std::thread put;
  env.after_rename = {Path(name), [&] {
                        {
                          std::lock_guard<std::mutex> l(mu);
                          renamed = true;
                        }
                        cv.notify_all();
                        std::unique_lock<std::mutex> l(mu);
                        cv.wait_for(l, std::chrono::milliseconds(300), [&] { return fetched; });
                      }};
  env.after_open = {Path(name), [&] {
                      put = std::thread([&] { EXPECT_OK(store->Put("m", Tokens{1, 2, 3}, CacheOf(3, 8))); });
                      std::unique_lock<std::mutex> l(mu);
                      ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return renamed; }));
                    }};
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), -1);  // the old file, corrupt
  {
    std::lock_guard<std::mutex> l(mu);
    fetched = true;
  }
  cv.notify_all();
  put.join();
  std::string got;
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}, &got), 3);
  EXPECT_EQ(got, Want(3, 8));
  EXPECT_TRUE(env_->FileExists(Path(name)));
  EXPECT_EQ(store->entries(), 1);
}

}  // namespace
}  // namespace kvstore
