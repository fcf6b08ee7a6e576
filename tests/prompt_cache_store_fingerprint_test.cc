// PromptCacheStore and model fingerprints: an entry written for another
// configuration of the same model key is refused with the reason, counted
// and never loaded; one whose layers disagree with the fingerprint it
// claims is dropped.
#include "kvstore/prompt_cache_store.h"

#include "libkvstore/tiers/store_format.h"
#include "prompt_cache_store_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::CacheOf;
using ::kvstore::testing::Fingerprint;
using ::kvstore::testing::Tokens;
using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

PromptCache Bf16CacheOf(int64_t tokens, uint64_t seed) {
  PromptCache cache = CacheOf(tokens, seed);
  Result<CacheState> state = cache[0]->State();
  EXPECT_OK(state);
  Result<Array> k = (*state)[0].array().AsType(DType::kBF16);
  Result<Array> v = (*state)[1].array().AsType(DType::kBF16);
  Result<std::unique_ptr<Cache>> bf16 = CacheFromState("KVCache", CacheState({*k, *v}), MetaState());
  EXPECT_OK(bf16);
  return {std::shared_ptr<Cache>(std::move(bf16).value())};
}

ModelFingerprint FingerprintOf(const PromptCache& cache) {
  Result<ModelFingerprint> fp = ModelFingerprint::Of("m", cache);
  EXPECT_OK(fp);
  return *fp;
}

int64_t Length(const Result<std::optional<PromptCacheStore::Hit>>& hit) {
  EXPECT_OK(hit);
  return hit.ok() && hit->has_value() ? (*hit)->length : -1;
}

class StoreFingerprintTest : public PromptCacheStoreTest {
 protected:
  const ModelFingerprint f16_ = FingerprintOf(CacheOf(1, 1));
  const ModelFingerprint bf16_ = FingerprintOf(Bf16CacheOf(1, 1));
};

TEST_F(StoreFingerprintTest, AnotherConfigurationIsRefusedWithTheReasonAndNeverLoaded) {
  {
    std::unique_ptr<PromptCacheStore> store = OpenStore();
    ASSERT_OK(store->Put(f16_, Tokens{1}, CacheOf(1, 1)));
    ASSERT_OK(store->Put("m", Tokens{1, 2, 3}, CacheOf(3, 2)));  // records its own fingerprint
  }
  const std::string name = FileOf({1, 2, 3});
  for (bool from_manifest : {true, false}) {
    SCOPED_TRACE(from_manifest ? "indexed from the manifest" : "indexed from the headers");
    // Spoil the longer entry's tensors: loading it would drop it as corrupt.
    std::vector<std::byte> bytes = testing::FileBytes(env_.get(), Path(name));
    bytes[bytes.size() - 3] ^= std::byte{0x40};
    ASSERT_OK(WriteStringAtomic(env_.get(), Path(name), bytes));
    if (!from_manifest) {
      ASSERT_OK(env_->RemoveFile(Path("MANIFEST")));
    }
    StoreOpenReport report;
    std::unique_ptr<PromptCacheStore> store = OpenStore(&report);
    EXPECT_EQ(report.from_manifest, from_manifest ? 2 : 0);
    EXPECT_EQ(Length(store->FetchLongestPrefix(bf16_, Tokens{1, 2, 3, 4})), -1);
    EXPECT_EQ(store->fingerprint_refused(), 2);
    EXPECT_NE(store->last_refusal().find(": written for another model configuration: layer 0 (KVCache): dtype F16 != "
                                         "BF16 (file != asked)"),
              std::string::npos)
        << store->last_refusal();
    EXPECT_EQ(store->corrupt_dropped(), 0);  // never loaded
    EXPECT_EQ(store->entries(), 2);
    EXPECT_TRUE(env_->FileExists(Path(name)));
    // The matching configuration is served; the spoiled file is then dropped.
    EXPECT_EQ(Length(store->FetchLongestPrefix(f16_, Tokens{1, 2, 3, 4})), 1);
    EXPECT_EQ(store->corrupt_dropped(), 1);
    ASSERT_OK(store->Put("m", Tokens{1, 2, 3}, CacheOf(3, 2)));
  }
}

TEST_F(StoreFingerprintTest, EntriesOfTheSameKeyFollowTheLastPut) {
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  ASSERT_OK(store->Put(f16_, Tokens{5, 6}, CacheOf(2, 3)));
  ASSERT_OK(store->Put(bf16_, Tokens{5, 6}, Bf16CacheOf(2, 3)));  // the same file, replaced
  EXPECT_EQ(Length(store->FetchLongestPrefix(f16_, Tokens{5, 6, 7})), -1);
  ASSERT_OK_AND_ASSIGN(auto hit, store->FetchLongestPrefix(bf16_, Tokens{5, 6, 7}));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(Fingerprint(*hit->cache[0]), Fingerprint(*Bf16CacheOf(2, 3)[0]));
  // The plain model key still reaches it, whatever its configuration.
  EXPECT_EQ(Length(store->FetchLongestPrefix("m", Tokens{5, 6, 7})), 2);
  EXPECT_THAT(store->Put(f16_, Tokens{8}, Bf16CacheOf(1, 4)),
              testing::HasCode(StatusCode::kInvalidArgument, "cache does not match the model"));
}

TEST_F(StoreFingerprintTest, AFileWithoutAFingerprintIsRefusedToFingerprintFetches) {
  ASSERT_OK(env_->CreateDir(testing::kDir));
  const Tokens key = {4, 4};
  ASSERT_OK(SavePromptCache(env_.get(), Path(StoreFileName("m", key)), CacheOf(2, 5), StoreKeyMetadata("m", key)));
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(Length(store->FetchLongestPrefix(f16_, key)), -1);
  EXPECT_NE(store->last_refusal().find("records no model fingerprint"), std::string::npos);
  EXPECT_EQ(Length(store->FetchLongestPrefix("m", key)), 2);
}

// A header that claims the asked fingerprint over layers that are not its.
TEST_F(StoreFingerprintTest, LayersThatDisagreeWithTheirFingerprintAreDropped) {
  ASSERT_OK(env_->CreateDir(testing::kDir));
  const Tokens key = {7};
  Metadata metadata = StoreKeyMetadata("m", key);
  metadata.emplace_back(std::string(kStoreFingerprintKey), f16_.json());
  ASSERT_OK(SavePromptCache(env_.get(), Path(StoreFileName("m", key)), Bf16CacheOf(1, 6), metadata));
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(Length(store->FetchLongestPrefix(f16_, Tokens{7, 8})), -1);
  EXPECT_EQ(store->mismatched_dropped(), 1);
  EXPECT_EQ(store->entries(), 0);
  // An unparsable fingerprint makes the file no store entry at all.
  metadata.back().second = "{\"format\":";
  ASSERT_OK(SavePromptCache(env_.get(), Path(StoreFileName("m", key)), CacheOf(1, 6), metadata));
  StoreOpenReport report;
  store.reset();
  store = OpenStore(&report);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_NE(report.dropped[0].find("model fingerprint"), std::string::npos) << report.dropped[0];
}

}  // namespace
}  // namespace kvstore
