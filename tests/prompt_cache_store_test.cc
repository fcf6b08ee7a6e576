// PromptCacheStore: the disk tier serves the longest stored prefix, and
// never KV of another key, whatever was done to its files or manifest.
#include "kvstore/prompt_cache_store.h"

#include <thread>

#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::Fingerprint;
using Tokens = std::vector<int32_t>;

constexpr char kDir[] = "/store";

// One KVCache layer of `tokens` tokens whose content depends on `seed`.
PromptCache CacheOf(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  Array k = testing::RandomArray(DType::kF16, {1, 2, tokens, 8}, seed);
  Array v = testing::RandomArray(DType::kF16, {1, 2, tokens, 8}, seed + 1000);
  EXPECT_OK(kv->UpdateAndFetch(k, v));
  return {kv};
}

class PromptCacheStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<PromptCacheStore> OpenStore(StoreOpenReport* report = nullptr, int64_t max_bytes = int64_t{1} << 30) {
    Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(env_.get(), kDir, {max_bytes}, report);
    EXPECT_OK(store);
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // Puts each key with the cache CacheOf(size, seed) and closes the store.
  void PutAll(const std::vector<std::pair<Tokens, uint64_t>>& entries) {
    std::unique_ptr<PromptCacheStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (const auto& [tokens, seed] : entries) {
      ASSERT_OK(store->Put("m", tokens, CacheOf(static_cast<int64_t>(tokens.size()), seed)));
    }
  }

  // The store file whose metadata holds these tokens (read from the file).
  std::string FileOf(const Tokens& tokens) {
    std::string text;
    for (int32_t t : tokens) text += (text.empty() ? "" : ",") + std::to_string(t);
    Result<std::vector<std::string>> names = env_->GetChildren(kDir);
    EXPECT_OK(names);
    if (!names.ok()) return "";
    for (const std::string& name : *names) {
      if (!name.ends_with(".safetensors")) continue;
      Result<PromptCacheInfo> info = ReadPromptCacheInfo(env_.get(), std::string(kDir) + "/" + name);
      if (!info.ok()) continue;
      for (const auto& [k, v] : info->user_metadata) {
        if (k == "kvstore_tokens" && v == text) return name;
      }
    }
    ADD_FAILURE() << "no store file holds tokens " << text;
    return "";
  }

  std::string Path(const std::string& name) const { return std::string(kDir) + "/" + name; }

  void Rename(const std::string& from, const std::string& to) { ASSERT_OK(env_->RenameFile(Path(from), Path(to))); }

  void Swap(const std::string& a, const std::string& b) {
    Rename(a, "swap.tmp");
    Rename(b, a);
    Rename("swap.tmp", b);
  }

  std::string Manifest() {
    const std::vector<std::byte> bytes = testing::FileBytes(env_.get(), Path("MANIFEST"));
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  void SetManifest(const std::string& text) {
    ASSERT_OK(WriteStringAtomic(env_.get(), Path("MANIFEST"), std::as_bytes(std::span(text))));
  }

  // Fetches `query`; the hit's length, or -1 on a miss. `fingerprint`
  // receives the served layer's fingerprint.
  int64_t Fetch(PromptCacheStore& store, const Tokens& query, std::string* fingerprint = nullptr) {
    Result<std::optional<PromptCacheStore::Hit>> hit = store.FetchLongestPrefix("m", query);
    EXPECT_OK(hit);
    if (!hit.ok() || !hit->has_value()) return -1;
    if (fingerprint) *fingerprint = Fingerprint(*(*hit)->cache.at(0));
    return (*hit)->length;
  }

  static std::string Want(int64_t tokens, uint64_t seed) { return Fingerprint(*CacheOf(tokens, seed)[0]); }

  std::unique_ptr<Env> env_ = NewMemEnv();
};

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

// MANIFEST line "1,2,3" edited to "9": [9,10] must not get the [1,2,3] cache.
TEST_F(PromptCacheStoreTest, EditedManifestTokensAreNotTrusted) {
  PutAll({{{1, 2, 3}, 7}});
  std::string manifest = Manifest();
  const size_t at = manifest.find(" 1,2,3\n");
  ASSERT_NE(at, std::string::npos) << manifest;
  manifest.replace(at, 7, " 9\n");
  SetManifest(manifest);

  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.manifest_ignored, 1);
  EXPECT_EQ(report.from_manifest, 0);
  EXPECT_EQ(Fetch(*store, {9, 10}), -1);
  // The file itself is sound: it is indexed from its header and still served.
  std::string got;
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}, &got), 3);
  EXPECT_EQ(got, Want(3, 7));
  EXPECT_EQ(store->mismatched_dropped(), 0);
}

// A file renamed to a name its key does not give is dropped at open.
TEST_F(PromptCacheStoreTest, RenamedFileIsDropped) {
  PutAll({{{1, 2, 3}, 7}});
  Rename(FileOf({1, 2, 3}), "0123456789abcdef.safetensors");

  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_THAT(report.dropped[0], ::testing::StartsWith("0123456789abcdef.safetensors: holds the key of "));
  EXPECT_EQ(store->mismatched_dropped(), 1);
  EXPECT_EQ(store->entries(), 0);
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), -1);
  EXPECT_FALSE(env_->FileExists(Path("0123456789abcdef.safetensors")));
}

// One entry's file moved over another's (same size, so the manifest line
// is used): the file's own key disagrees with the one asked for.
TEST_F(PromptCacheStoreTest, FileMovedOverAnotherEntryIsNotServed) {
  PutAll({{{1, 2, 3}, 7}, {{4, 5, 6}, 8}});
  const std::string a = FileOf({1, 2, 3}), b = FileOf({4, 5, 6});
  ASSERT_OK(env_->RemoveFile(Path(b)));
  Rename(a, b);

  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(Fetch(*store, {4, 5, 6, 7}), -1);
  EXPECT_EQ(store->mismatched_dropped(), 1);
  EXPECT_EQ(store->corrupt_dropped(), 0);
  EXPECT_EQ(store->entries(), 0);
  EXPECT_FALSE(env_->FileExists(Path(b)));
}

// Two entries' files exchanged, manifest intact: caught when loaded.
TEST_F(PromptCacheStoreTest, SwappedFilesAreNotServed) {
  PutAll({{{1, 2, 3}, 7}, {{4, 5, 6}, 8}});
  Swap(FileOf({1, 2, 3}), FileOf({4, 5, 6}));

  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.from_manifest, 2);
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 9}), -1);
  EXPECT_EQ(Fetch(*store, {4, 5, 6, 9}), -1);
  EXPECT_EQ(store->mismatched_dropped(), 2);
  EXPECT_EQ(store->entries(), 0);
}

// Exchanged files without a manifest: caught by their names at open.
TEST_F(PromptCacheStoreTest, SwappedFilesWithoutManifestAreDroppedAtOpen) {
  PutAll({{{1, 2, 3}, 7}, {{4, 5, 6}, 8}});
  Swap(FileOf({1, 2, 3}), FileOf({4, 5, 6}));
  ASSERT_OK(env_->RemoveFile(Path("MANIFEST")));

  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  EXPECT_EQ(report.dropped.size(), 2u);
  EXPECT_EQ(store->mismatched_dropped(), 2);
  EXPECT_EQ(store->entries(), 0);
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 9}), -1);
}

// A bad longer entry is skipped and the next shorter good one served.
TEST_F(PromptCacheStoreTest, FallsBackToAShorterPrefixPastABadEntry) {
  PutAll({{{1, 2}, 5}, {{1, 2, 3}, 7}, {{4, 5, 6}, 8}});
  Swap(FileOf({1, 2, 3}), FileOf({4, 5, 6}));

  std::unique_ptr<PromptCacheStore> store = OpenStore();
  std::string got;
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 9}, &got), 2);
  EXPECT_EQ(got, Want(2, 5));
  EXPECT_EQ(store->mismatched_dropped(), 1);
}

TEST_F(PromptCacheStoreTest, CorruptFileIsAMissAndRemoved) {
  PutAll({{{1, 2, 3}, 7}});
  const std::string name = FileOf({1, 2, 3});
  std::vector<std::byte> bytes = testing::FileBytes(env_.get(), Path(name));
  bytes[bytes.size() - 3] ^= std::byte{0x40};  // a tensor byte
  ASSERT_OK(WriteStringAtomic(env_.get(), Path(name), bytes));

  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), -1);
  EXPECT_EQ(store->corrupt_dropped(), 1);
  EXPECT_EQ(store->entries(), 0);
  EXPECT_FALSE(env_->FileExists(Path(name)));
}

// A read that fails for an I/O error is a miss that keeps the entry.
TEST_F(PromptCacheStoreTest, UnreadableFileIsSkippedButKept) {
  PutAll({{{1, 2}, 5}, {{1, 2, 3}, 7}});
  const std::string longer = Path(FileOf({1, 2, 3}));
  struct UnreadableEnv : FaultInjectionEnv {
    using FaultInjectionEnv::FaultInjectionEnv;
    std::string unreadable;
    Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override {
      if (path == unreadable) return Status::IOError(path + ": injected read error");
      return FaultInjectionEnv::OpenReadable(path);
    }
  } env(env_.get());
  Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(&env, kDir, {});
  ASSERT_OK(store);
  env.unreadable = longer;
  EXPECT_EQ(Fetch(**store, {1, 2, 3, 4}), 2);
  EXPECT_EQ((*store)->entries(), 2);
  EXPECT_EQ((*store)->corrupt_dropped(), 0);
  env.unreadable.clear();
  EXPECT_EQ(Fetch(**store, {1, 2, 3, 4}), 3);
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

TEST_F(PromptCacheStoreTest, FailedPutKeepsTheOldEntry) {
  PutAll({{{1, 2, 3}, 7}});
  FaultInjectionEnv env(env_.get());
  Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(&env, kDir, {});
  ASSERT_OK(store);
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
    ASSERT_OK(probe->Put("m", Tokens{100}, CacheOf(4, 1)));
    one = probe->bytes();
  }
  ASSERT_OK(env_->RemoveFile(Path(FileOf({100}))));
  ASSERT_OK(env_->RemoveFile(Path("MANIFEST")));
  std::unique_ptr<PromptCacheStore> store = OpenStore(nullptr, 2 * one + one / 2);
  ASSERT_OK(store->Put("m", Tokens{101}, CacheOf(4, 1)));
  ASSERT_OK(store->Put("m", Tokens{102}, CacheOf(4, 2)));
  EXPECT_EQ(Fetch(*store, {101, 0}), 1);  // 101 becomes the most recent
  ASSERT_OK(store->Put("m", Tokens{103}, CacheOf(4, 3)));
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
