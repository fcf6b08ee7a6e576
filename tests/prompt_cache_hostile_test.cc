// Hostile or unusual prompt-cache files and conversions: every case gets a
// clear error (or loads as the format says) without crashing, huge
// allocations, or corrupted bytes passing a verified conversion.
#include "kvstore/arrays_cache.h"
#include "kvstore/chunked_kv_cache.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::FileBytes;
using ::kvstore::testing::HasCode;
using ::kvstore::testing::WriteRaw;

class HostileFileTest : public ::testing::Test {
 protected:
  Result<LoadedPromptCache> Load(const std::vector<NamedArray>& tensors, const Metadata& md) {
    EXPECT_OK(WriteRaw(env_.get(), "/h", tensors, md));
    return LoadPromptCache(env_.get(), "/h");
  }
  std::unique_ptr<Env> env_ = NewMemEnv();
  Array k_ = testing::RandomArray(DType::kF16, {1, 2, 3, 8}, 31);
  Array empty_ = Array::Zeros(DType::kF16, {0});
};

TEST_F(HostileFileTest, DeeplyDottedNamesAreRefusedNotRecursed) {
  std::string deep = "0.0";
  for (int i = 0; i < 20000; ++i) deep += ".0";
  EXPECT_THAT(Load({}, {{deep, ""}, {"2.0", "Foo"}}), HasCode(StatusCode::kCorruption, "parts"));
  EXPECT_THAT(Load({{deep, empty_}}, {{"2.0", "Foo"}}), HasCode(StatusCode::kCorruption, "parts"));
}

TEST_F(HostileFileTest, SparseIndicesDoNotBecomeHugeLists) {
  Metadata md;
  for (int i = 0; i < 10; ++i) {
    md.emplace_back("2." + std::to_string(i), "KVCache");
    md.emplace_back("0." + std::to_string(i) + ".999999", "");
  }
  Result<LoadedPromptCache> r = Load({}, md);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(Load({}, {{"2.0", "KVCache"}, {"2.999999", "KVCache"}, {"0.0", ""}}),
              HasCode(StatusCode::kNotSupported, "not a list"));
}

TEST_F(HostileFileTest, QuantizedParametersAreRangeCheckedBeforeNarrowing) {
  // -4294967292 truncates to 4 in 32 bits.
  EXPECT_THAT(Load({}, {{"0.0.0", "256"}, {"0.0.1", "0"}, {"0.0.2", "64"}, {"0.0.3", "-4294967292"},
                        {"0.1.0", ""}, {"2.0", "QuantizedKVCache"}, {"2.1", "KVCache"}}),
              HasCode(StatusCode::kCorruption, "bits"));
}

TEST_F(HostileFileTest, ChunkedOnlySwiftFiles) {
  // Before its first update mlx-swift-lm saves a ChunkedKVCache without tensors.
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache empty,
                       Load({}, {{"0.0.0", "512"}, {"0.0.1", "0"}, {"2.0", "ChunkedKVCache"}}));
  EXPECT_EQ(empty.layout, PromptCacheLayout::kMlxSwiftLm);
  EXPECT_TRUE(empty.cache[0]->Empty());
  EXPECT_THAT(Load({{"0.0", k_}, {"0.1", k_}}, {{"0.0.0", "None"}, {"0.0.1", "0"}, {"2.0", "ChunkedKVCache"}}),
              HasCode(StatusCode::kNotSupported, "chunk size None"));
  // ...and mlx-lm cannot load one, so it is not written for mlx-lm.
  auto chunked = std::make_shared<ChunkedKVCache>(std::nullopt);
  ASSERT_OK(chunked->UpdateAndFetch(k_, k_));
  EXPECT_THAT(SavePromptCache(env_.get(), "/c", {chunked}, {}), HasCode(StatusCode::kInvalidArgument, "None"));
}

TEST_F(HostileFileTest, SwiftCacheListWithAnUnloadableChildIsMarked) {
  ASSERT_OK(WriteRaw(env_.get(), "/h", {{"0.0", k_}},
                     {{"0.0.0", "1"}, {"0.0.1", "TurboQuantKVCache"}, {"0.0.2", "1"}, {"0.0.3", "5"},
                      {"0.0.4", "3"}, {"0.0.5", "4"}, {"0.0.6", "4"}, {"0.0.7", "4"}, {"0.0.8", "1"},
                      {"2.0", "CacheList"}}));
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env_.get(), "/h"));
  EXPECT_THAT(info.layers[0].unsupported, ::testing::HasSubstr("child 0: TurboQuantKVCache"));
  EXPECT_THAT(LoadPromptCache(env_.get(), "/h"), HasCode(StatusCode::kNotSupported, "TurboQuantKVCache"));
}

TEST_F(HostileFileTest, ModelStateKeysAloneAreUserMetadata) {
  // mlx-lm writes whatever user keys it is given; without Swift's state
  // tensors or class marker they are ordinary metadata.
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded,
                       Load({{"0.0", k_}, {"0.1", k_}}, {{"0.0", ""}, {"1.__mlx_lm_state_note", "x"}, {"2.0", "KVCache"}}));
  EXPECT_EQ(loaded.layout, PromptCacheLayout::kMlxLm);
  EXPECT_EQ(loaded.user_metadata, (Metadata{{"__mlx_lm_state_note", "x"}}));
  // We never write such a key: mlx-swift-lm reserves the prefix.
  EXPECT_THAT(SavePromptCache(env_.get(), "/o", loaded.cache, loaded.user_metadata),
              HasCode(StatusCode::kInvalidArgument, "reserved by mlx-swift-lm"));
  SavePromptCacheOptions swift;
  swift.layout = PromptCacheLayout::kMlxSwiftLm;
  for (const char* key : {"a..b", ".a", "a."}) {
    EXPECT_THAT(SavePromptCache(env_.get(), "/o", loaded.cache, {{key, "v"}}, swift),
                HasCode(StatusCode::kInvalidArgument, "empty part")) << key;
  }
}

TEST_F(HostileFileTest, LegacyNamesWithLeadingZerosAreNotLegacy) {
  EXPECT_THAT(Load({{"01_keys", k_}, {"01_values", k_}, {"1_keys", k_}, {"1_values", k_}}, {}),
              HasCode(StatusCode::kNotSupported, "no class names"));
}

// Verified conversions never pass corrupted input bytes on.
class CorruptConversionTest : public ::testing::Test {
 protected:
  // Saves `cache` with digests (for the current mlx-lm, which keeps
  // ArraysCache padding), then flips a byte of tensor `name`.
  void WriteCorrupted(const PromptCache& cache, const std::string& name) {
    SavePromptCacheOptions current;
    current.layout = PromptCacheLayout::kMlxLm;
    ASSERT_OK(SavePromptCache(env_.get(), "/in", cache, {}, current));
    ASSERT_OK_AND_ASSIGN(auto st, SafetensorsFile::Open(env_.get(), "/in"));
    const TensorInfo* t = st->header().FindTensor(name);
    ASSERT_NE(t, nullptr);
    std::vector<std::byte> bytes = FileBytes(env_.get(), "/in");
    bytes[st->header().data_offset() + t->begin] ^= std::byte{1};
    ASSERT_OK(WriteStringAtomic(env_.get(), "/in", bytes));
  }
  std::unique_ptr<Env> env_ = NewMemEnv();
};

TEST_F(CorruptConversionTest, ArraysCachePaddingMovedIntoSwiftMetadataIsChecked) {
  auto arrays = std::make_shared<ArraysCache>(2, std::vector<int32_t>{3, 5});
  ASSERT_OK(arrays->SetState(CacheState({CacheState({testing::RandomArray(DType::kF32, {2, 4}, 1),
                                                     testing::RandomArray(DType::kF32, {2, 4}, 2)}),
                                         CacheState(Array::FromInt32s({3, 5})), CacheState(Array::Zeros(DType::kF32, {0}))})));
  WriteCorrupted({arrays}, "0.1");  // left padding
  ConvertOptions swift;
  swift.output.layout = PromptCacheLayout::kMlxSwiftLm;
  EXPECT_THAT(ConvertPromptCacheFile(env_.get(), "/in", "/out", swift),
              HasCode(StatusCode::kCorruption, "tensor '0.1'"));
  EXPECT_FALSE(env_->FileExists("/out"));
}

TEST_F(CorruptConversionTest, CopiedTensorWithoutAStoredDigestFails) {
  ASSERT_OK(SavePromptCache(env_.get(), "/in", testing::SmallCache(), {}));
  // Rename the digest entry of tensor 0.0 (same length), then corrupt 0.0.
  std::vector<std::byte> bytes = FileBytes(env_.get(), "/in");
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t at = text.find("\\\"0.0\\\":\\\"");  // inside the escaped digest JSON
  ASSERT_NE(at, std::string::npos);
  bytes[at + 4] = std::byte{'9'};
  ASSERT_OK(WriteStringAtomic(env_.get(), "/in", bytes));
  ASSERT_OK_AND_ASSIGN(auto st, SafetensorsFile::Open(env_.get(), "/in"));
  bytes[st->header().data_offset() + st->header().FindTensor("0.0")->begin] ^= std::byte{1};
  ASSERT_OK(WriteStringAtomic(env_.get(), "/in", bytes));
  EXPECT_THAT(ConvertPromptCacheFile(env_.get(), "/in", "/out", ConvertOptions{}),
              HasCode(StatusCode::kCorruption, "tensor '0.0': SHA-256 mismatch: expected (no valid digest stored)"));
  EXPECT_FALSE(env_->FileExists("/out"));
}

TEST_F(CorruptConversionTest, NullTransformResultIsAnError) {
  ASSERT_OK(SavePromptCache(env_.get(), "/in", testing::SmallCache(), {}));
  ConvertOptions options;
  options.transform = [](size_t, std::shared_ptr<Cache>) -> Result<std::shared_ptr<Cache>> { return nullptr; };
  EXPECT_THAT(ConvertPromptCacheFile(env_.get(), "/in", "/out", options),
              HasCode(StatusCode::kInvalidArgument, "no cache"));
}

}  // namespace
}  // namespace kvstore
