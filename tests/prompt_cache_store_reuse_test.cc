// PromptCacheStore: what a fetch checks in a loaded entry beyond its
// digests, and entries replaced while they are being dropped.
#include "kvstore/prompt_cache_store.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "kvstore/arrays_cache.h"
#include "libkvstore/tiers/store_format.h"
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
    if (path.ends_with(".safetensors")) ++entry_reads;
    Fire(after_open, path);
    return file;
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    Status s = FaultInjectionEnv::RenameFile(from, to);
    Fire(after_rename, to);
    return s;
  }
  Hook after_open, after_rename;
  std::atomic<int> entry_reads{0};  // opens of store entries

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
  ASSERT_OK(store->WaitUntilIndexed());

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

// [first, first + n)
Tokens Span(int32_t first, int n) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

Tokens Then(Tokens t, int32_t token) {
  t.push_back(token);
  return t;
}

// CacheOf(tokens, seed) trimmed to its first `keep` tokens, fingerprinted.
std::string TrimmedFingerprint(int64_t tokens, uint64_t seed, int64_t keep) {
  PromptCache cache = CacheOf(tokens, seed);
  EXPECT_OK(cache[0]->Trim(tokens - keep));
  return ::kvstore::testing::Fingerprint(*cache[0]);
}

// The "edit the last message" case on disk: a longer stored prompt that
// shares more tokens with the query than any stored prefix is served
// trimmed to the tokens it shares, as the memory tier does.
TEST_F(PromptCacheStoreTest, LongerEntryIsServedTrimmedToTheCommonPrefix) {
  // Whole entries only: the caches below hold other rows for the same
  // tokens, which a delta entry would take from its base
  // (prompt_cache_store_delta_test.cc).
  PromptCacheStoreOptions options;
  options.share_prefixes = false;
  std::unique_ptr<PromptCacheStore> store = OpenStoreWith(options);
  ASSERT_OK(store->Put("m", Span(1, 100), CacheOf(100, 7)));
  std::string got;
  EXPECT_EQ(Fetch(*store, Then(Span(1, 60), 999), &got), 60);
  EXPECT_EQ(got, TrimmedFingerprint(100, 7, 60));
  EXPECT_EQ(Fetch(*store, Span(1, 40), &got), 40);  // a strict prefix of the stored prompt
  EXPECT_EQ(got, TrimmedFingerprint(100, 7, 40));
  EXPECT_EQ(Fetch(*store, Then(Span(1, 10), 999)), -1);  // under one granule (32 tokens): not probed
  // A stored prefix sharing as many tokens wins; one sharing fewer loses.
  ASSERT_OK(store->Put("m", Span(1, 70), CacheOf(70, 8)));
  EXPECT_EQ(Fetch(*store, Then(Span(1, 70), 999), &got), 70);
  EXPECT_EQ(got, Want(70, 8));
  EXPECT_EQ(Fetch(*store, Then(Span(1, 80), 999), &got), 80);
  EXPECT_EQ(got, TrimmedFingerprint(100, 7, 80));
  ASSERT_OK_AND_ASSIGN(auto other_model, store->FetchLongestPrefix("other", Then(Span(1, 80), 999)));
  EXPECT_FALSE(other_model.has_value());
  EXPECT_EQ(store->entries(), 2);
  EXPECT_EQ(store->corrupt_dropped() + store->mismatched_dropped(), 0);
}

// An entry with a layer that cannot be trimmed serves only prompts it is a
// prefix of. Entries indexed at Open are tried once, then known.
TEST_F(PromptCacheStoreTest, UntrimmableLongerEntryIsNotServedAndLearned) {
  auto arrays = std::make_shared<ArraysCache>(1);
  ASSERT_OK(arrays->SetSlot(0, ::kvstore::testing::RandomArray(DType::kF16, {1, 4}, 3)));
  PromptCache hybrid = CacheOf(100, 7);
  hybrid.push_back(arrays);
  ASSERT_OK(OpenStore()->Put("m", Span(1, 100), hybrid));
  HookEnv env(env_.get());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PromptCacheStore> store,
                       PromptCacheStore::Open(&env, kvstore::testing::kDir, {}));
  ASSERT_OK(store->WaitUntilIndexed());
  EXPECT_EQ(Fetch(*store, Then(Span(1, 60), 999)), -1);
  EXPECT_EQ(env.entry_reads, 1);  // loaded once, found untrimmable
  EXPECT_EQ(Fetch(*store, Then(Span(1, 60), 999)), -1);
  EXPECT_EQ(env.entry_reads, 1);
  EXPECT_EQ(Fetch(*store, Then(Span(1, 100), 999)), 100);
  EXPECT_EQ(store->entries(), 1);
  // Known at a Put: never loaded for a longer match.
  ASSERT_OK(store->Put("m", Span(1000, 100), hybrid));
  const int reads = env.entry_reads;
  EXPECT_EQ(Fetch(*store, Then(Span(1000, 60), 999)), -1);
  EXPECT_EQ(env.entry_reads, reads);
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

using ::kvstore::testing::CacheOf;
using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

// A trimmable entry supersedes its stored prefixes of >= 32 tokens (one
// lookup granule) of the same model configuration: a prompt and then
// prompt + completion cost one file, and each prefix is still served,
// from the longer entry.
TEST_F(PromptCacheStoreTest, ATrimmableEntrySupersedesItsStoredPrefixes) {
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  ASSERT_OK(store->Put("m", Span(1, 20), CacheOf(20, 1)));   // under one granule: kept
  ASSERT_OK(store->Put("m", Span(1, 40), CacheOf(40, 2)));   // the prompt
  ASSERT_OK(store->Put("other", Span(1, 50), CacheOf(50, 3)));  // another model key: kept
  ASSERT_OK(store->Put("m", Span(1, 90), CacheOf(90, 4)));   // prompt + completion
  EXPECT_EQ(store->entries(), 3);
  EXPECT_EQ(store->prefixes_superseded(), 1);
  std::string got;
  EXPECT_EQ(Fetch(*store, Span(1, 40), &got), 40);  // from the longer entry, trimmed
  EXPECT_EQ(got, TrimmedFingerprint(90, 4, 40));
  EXPECT_EQ(Fetch(*store, Then(Span(1, 20), 999), &got), 20);
  EXPECT_EQ(got, Want(20, 1));
  // The next turn supersedes the last one, and a reopened store agrees.
  ASSERT_OK(store->Put("m", Span(1, 150), CacheOf(150, 5)));
  EXPECT_EQ(store->entries(), 3);
  EXPECT_EQ(store->prefixes_superseded(), 2);
  store.reset();
  store = OpenStore();
  EXPECT_EQ(store->entries(), 3);
  EXPECT_EQ(Fetch(*store, Span(1, 90), &got), 90);
  EXPECT_EQ(got, TrimmedFingerprint(150, 5, 90));
}

// An entry with a layer that cannot be trimmed serves no shorter prompt:
// its prefixes stay. So does a prefix written for another configuration
// of the same model key (another dtype here).
TEST_F(PromptCacheStoreTest, PrefixesStayWhenTheLongerEntryCannotServeThem) {
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  auto arrays = std::make_shared<ArraysCache>(1);
  ASSERT_OK(arrays->SetSlot(0, ::kvstore::testing::RandomArray(DType::kF16, {1, 4}, 3)));
  PromptCache hybrid = CacheOf(90, 7);
  hybrid.push_back(arrays);
  ASSERT_OK(store->Put("m", Span(1, 40), CacheOf(40, 2)));
  ASSERT_OK(store->Put("m", Span(1, 90), hybrid));
  EXPECT_EQ(store->entries(), 2);

  auto f32 = std::make_shared<KVCache>();
  ASSERT_OK(f32->UpdateAndFetch(::kvstore::testing::RandomArray(DType::kF32, {1, 2, 90, 8}, 5),
                                ::kvstore::testing::RandomArray(DType::kF32, {1, 2, 90, 8}, 6)));
  ASSERT_OK(store->Put("n", Span(1, 40), CacheOf(40, 2)));
  ASSERT_OK(store->Put("n", Span(1, 90), {f32}));
  EXPECT_EQ(store->entries(), 4);
  EXPECT_EQ(store->prefixes_superseded(), 0);
}

}  // namespace
}  // namespace kvstore
