// PromptCacheStore never serves KV of another key, whatever was done to
// its files or manifest: edited manifest lines, renamed, moved or swapped
// files are misses, counted and dropped.
#include "kvstore/prompt_cache_store.h"

#include "prompt_cache_store_testutil.h"

namespace kvstore {
namespace {

using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

// MANIFEST line "1,2,3" edited to "9": [9,10] must not get the [1,2,3] cache.
TEST_F(PromptCacheStoreTest, EditedManifestTokensAreNotTrusted) {
  PutAll({{{1, 2, 3}, 7}});
  std::string manifest = Manifest();
  const size_t at = manifest.find(" 1,2,3 ");
  ASSERT_NE(at, std::string::npos) << manifest;
  manifest.replace(at, 7, " 9 ");
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

// A file whose layers are impossible (here: a KVCache without its values)
// is dropped at open from its header alone, under its right name, with its
// key and digests in place: the manifest line is ignored because the size
// changed, and the header is checked as a load would check it.
TEST_F(PromptCacheStoreTest, FileWithAnImpossibleLayerIsDroppedAtOpen) {
  PutAll({{{1, 2, 3}, 7}});
  const std::string name = FileOf({1, 2, 3});
  Result<std::shared_ptr<const SafetensorsFile>> file = SafetensorsFile::Open(env_.get(), Path(name));
  ASSERT_OK(file);
  std::vector<NamedArray> kept;
  for (const TensorInfo& t : (*file)->header().tensors) {
    if (t.name == "0.1") continue;  // layer 0's values
    Result<Array> a = (*file)->Tensor(t);
    ASSERT_OK(a);
    kept.push_back({t.name, a->Clone()});
  }
  const Metadata metadata = (*file)->header().metadata;
  file = Status::Internal("closed");
  ASSERT_OK(testing::WriteRaw(env_.get(), Path(name), kept, metadata));

  StoreOpenReport report;
  std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_THAT(report.dropped[0], ::testing::HasSubstr(name + ": Corruption: layer 0: KVCache: state must be"));
  EXPECT_EQ(store->entries(), 0);
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), -1);
  EXPECT_FALSE(env_->FileExists(Path(name)));
}

// The store writes XXH3-128 entries without fsync by default: a Put needs
// no sync at all, and durable = true brings both fsyncs back.
TEST_F(PromptCacheStoreTest, EntriesAreXxh3AndWrittenWithoutFsyncByDefault) {
  FaultInjectionEnv faults(env_.get());
  {
    ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(&faults, testing::kDir, PromptCacheStoreOptions{}));
    ASSERT_OK(store->WaitUntilIndexed().status());
    faults.FailAlways(FaultInjectionEnv::Op::kSync);  // after the manifest is compacted at open
    faults.FailAlways(FaultInjectionEnv::Op::kSyncDir);
    ASSERT_OK(store->Put("m", testing::Tokens{1, 2, 3}, testing::CacheOf(3, 7)));
  }
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env_.get(), Path(FileOf({1, 2, 3}))));
  EXPECT_TRUE(info.has_digests);
  EXPECT_EQ(info.digest_algorithm, DigestAlgorithm::kXxh3_128);

  PromptCacheStoreOptions durable;
  durable.durable = true;
  durable.digest = DigestAlgorithm::kSha256;
  FaultInjectionEnv faults2(env_.get());
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(&faults2, testing::kDir, durable));
  ASSERT_OK(store->WaitUntilIndexed().status());
  faults2.FailAlways(FaultInjectionEnv::Op::kSync);
  EXPECT_FALSE(store->Put("m", testing::Tokens{4, 5}, testing::CacheOf(2, 9)).ok());  // the fsync is back, and fails
}

// What a crash without fsync may leave under an entry's name: the file at
// its full size with its tail never written (zeros). A load verifies it:
// a counted miss, never the torn KV.
TEST_F(PromptCacheStoreTest, TornEntryIsACountedMiss) {
  PutAll({{{1, 2, 3}, 7}});
  const std::string name = FileOf({1, 2, 3});
  std::vector<std::byte> bytes = testing::FileBytes(env_.get(), Path(name));
  std::fill(bytes.end() - 64, bytes.end(), std::byte{0});
  ASSERT_OK(WriteStringAtomic(env_.get(), Path(name), bytes));

  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4}), -1);
  EXPECT_EQ(store->corrupt_dropped(), 1);
}

}  // namespace
}  // namespace kvstore
