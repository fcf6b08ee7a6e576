// mlx-swift-lm's layout (docs/format.md §5.6): files spelled out as
// mlx-swift-lm's savePromptCache writes them load into the caches mlx-lm
// would hold; every mlx-lm fixture converts to the Swift layout and back with
// every tensor byte and metadata entry preserved; malformed Swift files get
// clear errors.
#include <regex>

#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/quantized_kv_cache.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::Fingerprint;
using ::kvstore::testing::HasCode;
using ::kvstore::testing::MlxLmFixtures;
using ::kvstore::testing::WriteRaw;

constexpr char kPath[] = "/swift.safetensors";

class SwiftLayoutTest : public ::testing::Test {
 protected:
  Result<LoadedPromptCache> Load(const std::vector<NamedArray>& tensors, const Metadata& md) {
    EXPECT_OK(WriteRaw(env_.get(), kPath, tensors, md));
    return LoadPromptCache(env_.get(), kPath);
  }
  std::unique_ptr<Env> env_ = NewMemEnv();
  Array k_ = testing::RandomArray(DType::kF16, {1, 2, 6, 8}, 11);
  Array v_ = testing::RandomArray(DType::kF16, {1, 2, 6, 8}, 12);
};

TEST_F(SwiftLayoutTest, KVCacheAndRotatingWithSwiftMetas) {
  auto kv = std::make_shared<KVCache>();
  ASSERT_OK(kv->UpdateAndFetch(k_, v_));
  auto rot = std::make_shared<RotatingKVCache>(4, 1);
  ASSERT_OK(rot->UpdateAndFetch(k_, v_));
  ASSERT_OK_AND_ASSIGN(CacheState rs, rot->State());
  const MetaState rm = rot->meta_state();  // keep, max_size, offset, _idx
  // As mlx-swift-lm writes them: "i.j" tensors, [""] for KVCache, and
  // [keep, maxSize, step, offset, idx, capacityOrigin] for RotatingKVCache.
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded,
                       Load({{"0.0", k_}, {"0.1", v_}, {"1.0", rs[0].array()}, {"1.1", rs[1].array()}},
                            {{"0.0.0", ""},
                             {"0.1.0", rm[0].str()},
                             {"0.1.1", rm[1].str()},
                             {"0.1.2", "256"},
                             {"0.1.3", rm[2].str()},
                             {"0.1.4", rm[3].str()},
                             {"0.1.5", "modelNative"},
                             {"1.model", "m"},
                             {"1.tokenizer.name", "dotted keys stay flat"},
                             {"2.0", "KVCacheSimple"},
                             {"2.1", "RotatingKVCache"}}));
  EXPECT_EQ(loaded.layout, PromptCacheLayout::kMlxSwiftLm);
  ASSERT_EQ(loaded.cache.size(), 2u);
  EXPECT_EQ(Fingerprint(*loaded.cache[0]), Fingerprint(*kv));
  EXPECT_EQ(Fingerprint(*loaded.cache[1]), Fingerprint(*rot));
  EXPECT_EQ(loaded.user_metadata, (Metadata{{"model", "m"}, {"tokenizer.name", "dotted keys stay flat"}}));
}

TEST_F(SwiftLayoutTest, QuantizedArraysMambaAndEmptyCaches) {
  auto kv = std::make_shared<KVCache>();
  ASSERT_OK(kv->UpdateAndFetch(testing::RandomArray(DType::kF16, {1, 2, 6, 64}, 15),
                               testing::RandomArray(DType::kF16, {1, 2, 6, 64}, 16)));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<QuantizedKVCache> q, kv->ToQuantized(32, 4));
  ASSERT_OK_AND_ASSIGN(CacheState qs, q->State());
  Array s0 = testing::RandomArray(DType::kF32, {2, 3}, 13);
  Array s2 = testing::RandomArray(DType::kF32, {2, 5}, 14);
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded,
                       Load({{"0.0", qs[0][0].array()}, {"0.1", qs[0][1].array()}, {"0.2", qs[0][2].array()},
                             {"0.3", qs[1][0].array()}, {"0.4", qs[1][1].array()}, {"0.5", qs[1][2].array()},
                             {"1.0", s0}, {"1.1", s2},  // ArraysCache: slots 0 and 2 of 3
                             {"2.0", s0}, {"2.1", s2}},  // MambaCache, Swift's legacy [""] meta
                            {{"0.0.0", "256"}, {"0.0.1", "6"}, {"0.0.2", "32"}, {"0.0.3", "4"},
                             {"0.1.0", "3"}, {"0.1.1", "0,2"}, {"0.1.2", "2,0"},
                             {"0.2.0", ""},
                             {"0.3.0", ""},  // an empty KVCache: no tensors
                             {"2.0", "QuantizedKVCache"}, {"2.1", "ArraysCache"}, {"2.2", "MambaCache"},
                             {"2.3", "KVCache"}}));
  ASSERT_EQ(loaded.cache.size(), 4u);
  EXPECT_EQ(Fingerprint(*loaded.cache[0]), Fingerprint(*q));
  ASSERT_OK_AND_ASSIGN(CacheState arrays, loaded.cache[1]->State());
  ASSERT_EQ(arrays[0].size(), 3u);
  EXPECT_TRUE(arrays[0][0].array().ContentEquals(s0));
  EXPECT_TRUE(arrays[0][1].is_none());
  EXPECT_TRUE(arrays[0][2].array().ContentEquals(s2));
  EXPECT_EQ(arrays[1].array().ToVector<int32_t>(), (std::vector<int32_t>{2, 0}));  // left padding
  EXPECT_EQ(arrays[2].array().numel(), 0);                                         // lengths: None
  EXPECT_EQ(loaded.cache[2]->class_name(), "MambaCache");
  ASSERT_OK_AND_ASSIGN(CacheState mamba, loaded.cache[2]->State());
  EXPECT_TRUE(mamba[0][1].array().ContentEquals(s2));
  EXPECT_EQ(loaded.cache[3]->class_name(), "KVCache");
  EXPECT_TRUE(loaded.cache[3]->Empty());
}

TEST_F(SwiftLayoutTest, CacheListIsFlat) {
  auto kv = std::make_shared<KVCache>();
  ASSERT_OK(kv->UpdateAndFetch(k_, v_));
  auto rot = std::make_shared<RotatingKVCache>(16);
  ASSERT_OK(rot->UpdateAndFetch(k_, v_));
  ASSERT_OK_AND_ASSIGN(CacheState rs, rot->State());
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded,
                       Load({{"0.0", k_}, {"0.1", v_}, {"0.2", rs[0].array()}, {"0.3", rs[1].array()}},
                            {{"0.0.0", "2"},
                             {"0.0.1", "KVCache"}, {"0.0.2", "2"}, {"0.0.3", "1"}, {"0.0.4", ""},
                             {"0.0.5", "RotatingKVCache"}, {"0.0.6", "2"}, {"0.0.7", "5"},
                             {"0.0.8", "0"}, {"0.0.9", "16"}, {"0.0.10", "256"}, {"0.0.11", "6"}, {"0.0.12", "6"},
                             {"2.0", "CacheList"}}));
  ASSERT_EQ(loaded.cache.size(), 1u);
  auto list = std::dynamic_pointer_cast<CacheList>(loaded.cache[0]);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(list->num_children(), 2u);
  EXPECT_EQ(Fingerprint(*list->child(0)), Fingerprint(*kv));
  EXPECT_EQ(Fingerprint(*list->child(1)), Fingerprint(*rot));
}

TEST_F(SwiftLayoutTest, MalformedFilesGetClearErrors) {
  const Array k = k_;
  struct Case {
    std::vector<NamedArray> tensors;
    Metadata md;
    StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {{{"0.0", k}, {"0.1", k}, {"0.2", k}}, {{"0.0.0", ""}, {"2.0", "KVCache"}}, StatusCode::kCorruption, "3 tensors"},
      {{{"0.0", k}, {"0.2", k}}, {{"0.0.0", ""}, {"2.0", "KVCache"}}, StatusCode::kCorruption, "0.1 is missing"},
      {{{"0.0", k}, {"0.1", k}, {"1.0", k}}, {{"0.0.0", ""}, {"2.0", "KVCache"}}, StatusCode::kCorruption,
       "not <layer>.<index>"},
      {{{"0.0", k}, {"0.01", k}}, {{"0.0.0", ""}, {"2.0", "KVCache"}}, StatusCode::kCorruption, "not <layer>.<index>"},
      {{{"0.0", k}, {"0.1", k}}, {{"0.0.0", ""}, {"2.0", "KVCache"}, {"2.1", "KVCache"}}, StatusCode::kCorruption,
       "1 meta states for 2 class names"},
      {{{"0.0", k}, {"0.1", k}},
       {{"0.0.0", "0"}, {"0.0.1", "4"}, {"0.0.2", "256"}, {"0.0.3", "x"}, {"0.0.4", "6"}, {"2.0", "RotatingKVCache"}},
       StatusCode::kCorruption, "not an integer"},
      {{{"0.0", k}, {"0.1", k}},
       {{"0.0.0", "0"}, {"0.0.1", "4"}, {"0.0.2", "256"}, {"0.0.3", "6"}, {"0.0.4", "4"}, {"0.0.5", "weird"},
        {"2.0", "RotatingKVCache"}},
       StatusCode::kCorruption, "capacity origin"},
      {{{"0.0", k}}, {{"0.0.0", "2"}, {"0.0.1", "0,5"}, {"2.0", "ArraysCache"}}, StatusCode::kCorruption,
       "do not match"},
      {{{"0.0", k}, {"0.1", k}}, {{"0.0.0", "2"}, {"0.0.1", "0,5"}, {"2.0", "ArraysCache"}}, StatusCode::kCorruption,
       "out of range"},
      {{{"0.0", k}}, {{"0.0.0", "99999"}, {"0.0.1", "0"}, {"2.0", "ArraysCache"}}, StatusCode::kCorruption,
       "slot count"},
      {{{"0.0", k}, {"0.1", k}}, {{"0.0.0", "2"}, {"0.0.1", "KVCache"}, {"0.0.2", "2"}, {"2.0", "CacheList"}},
       StatusCode::kCorruption, "truncated"},
      {{{"0.0", k}, {"0.1", k}},
       {{"0.0.0", "1"}, {"0.0.1", "KVCache"}, {"0.0.2", "3"}, {"0.0.3", "1"}, {"0.0.4", ""}, {"2.0", "CacheList"}},
       StatusCode::kCorruption, "out of range"},
      // Layer 0 as mlx-swift-lm writes a KVCache, layer 1 as mlx-lm does.
      {{{"0.0", k}, {"0.1", k}, {"1.0", k}, {"1.1", k}},
       {{"0.0.0", ""}, {"0.1", ""}, {"2.0", "KVCache"}, {"2.1", "KVCache"}}, StatusCode::kCorruption,
       "layers disagree"},
      {{{"0.0", k}, {"0.1", k}, {"0.2", k}, {"0.3", k}},
       {{"0.0.0", "256"}, {"0.0.1", "6"}, {"0.0.2", "64"}, {"0.0.3", "4"}, {"2.0", "QuantizedKVCache"}},
       StatusCode::kNotSupported, "without biases"},
      // (A second, Swift-only KVCache layer makes the layout unambiguous.)
      {{{"0.0", k}, {"0.1", k}},
       {{"0.0.0", "None"}, {"0.0.1", "0"}, {"0.1.0", ""}, {"2.0", "ChunkedKVCache"}, {"2.1", "KVCache"}},
       StatusCode::kNotSupported, "chunk size None"},
      {{{"0.0", k}}, {{"0.0.0", "3"}, {"0.0.1", "4"}, {"0.0.2", "4"}, {"0.0.3", "4"}, {"0.0.4", "1"},
                      {"2.0", "TurboQuantKVCache"}},
       StatusCode::kNotSupported, "TurboQuantKVCache"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_THAT(Load(c.tensors, c.md), HasCode(c.code, c.message));
  }
}

TEST_F(SwiftLayoutTest, ModelStateIsInspectedButNotLoaded) {
  ASSERT_OK(WriteRaw(env_.get(), kPath,
                     {{"0.0", k_}, {"0.1", v_}, {"__mlx_lm_state_tensor_0", Array::FromInt32s({7})}},
                     {{"0.0.0", ""},
                      {"1.__mlx_lm_state_version", "1"},
                      {"1.__mlx_lm_state_count", "1"},
                      {"1.__mlx_lm_state_0_key", "rope_delta"},
                      {"2.0", "__mlx_lm_state_v1__:KVCache"}}));
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env_.get(), kPath));
  EXPECT_EQ(info.layout, PromptCacheLayout::kMlxSwiftLm);
  ASSERT_EQ(info.layers.size(), 1u);
  EXPECT_EQ(info.layers[0].class_name, "KVCache");
  EXPECT_EQ(info.layers[0].offset, 6);
  EXPECT_THAT(info.unsupported, ::testing::HasSubstr("model state"));
  EXPECT_TRUE(info.user_metadata.empty());
  EXPECT_THAT(LoadPromptCache(env_.get(), kPath), HasCode(StatusCode::kNotSupported, "model state"));
}

// Every fixture mlx-lm could load: mlx-lm -> mlx-swift-lm -> mlx-lm keeps
// every tensor byte and metadata entry; the Swift file holds only "i.j"
// tensors and "0.i.j" metas, and loads into the same caches.
TEST(SwiftRoundTripTest, EveryFixtureCrossesBothWays) {
  std::unique_ptr<Env> env = NewMemEnv();
  const std::regex swift_tensor(R"(\d+\.\d+)"), swift_meta(R"((0\.\d+\.\d+)|(1\..+)|(2\.\d+))");
  int converted = 0;
  for (const std::string& path : MlxLmFixtures()) {
    SCOPED_TRACE(path);
    Result<LoadedPromptCache> loaded = LoadPromptCache(Env::Default(), path);
    if (!loaded.ok()) continue;  // fixtures mlx-lm could not load either
    SavePromptCacheOptions swift;
    swift.layout = PromptCacheLayout::kMlxSwiftLm;
    Status s = SavePromptCache(env.get(), "/s", loaded->cache, loaded->user_metadata, swift);
    if (!loaded->cache.empty() && loaded->cache[0]->class_name().starts_with("Batch")) {
      EXPECT_THAT(s, HasCode(StatusCode::kNotSupported, "no mlx-swift-lm equivalent"));
      continue;
    }
    ASSERT_OK(s);
    ASSERT_OK_AND_ASSIGN(auto st, SafetensorsFile::Open(env.get(), "/s"));
    for (const TensorInfo& t : st->header().tensors) EXPECT_TRUE(std::regex_match(t.name, swift_tensor)) << t.name;
    for (const auto& [key, v] : st->header().metadata) EXPECT_TRUE(std::regex_match(key, swift_meta)) << key;
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache back, LoadPromptCache(env.get(), "/s"));
    // ChunkedKVCache is laid out alike in both: such files read as mlx-lm.
    const bool all_chunked = std::all_of(loaded->cache.begin(), loaded->cache.end(),
                                         [](const auto& c) { return c->class_name() == "ChunkedKVCache"; });
    EXPECT_EQ(back.layout, all_chunked ? PromptCacheLayout::kMlxLm : PromptCacheLayout::kMlxSwiftLm);
    ASSERT_EQ(back.cache.size(), loaded->cache.size());
    for (size_t i = 0; i < back.cache.size(); ++i) {
      EXPECT_EQ(Fingerprint(*back.cache[i]), Fingerprint(*loaded->cache[i])) << "layer " << i;
    }
    SavePromptCacheOptions mlx;
    mlx.layout = loaded->layout;  // the fixture's mlx-lm version
    mlx.integrity = false;
    ASSERT_OK(SavePromptCache(env.get(), "/m", back.cache, back.user_metadata, mlx));
    ASSERT_OK_AND_ASSIGN(auto original, SafetensorsFile::Open(Env::Default(), path));
    ASSERT_OK_AND_ASSIGN(auto again, SafetensorsFile::Open(env.get(), "/m"));
    // Every key comes back; a file the other mlx-lm version would load as [] (no user
    // metadata) also gains the kvstore_format guard (docs/format.md §5.9), and nothing else.
    const bool guarded = again->header().FindMetadata("1." + std::string(kFormatKey)).has_value() &&
                         !original->header().FindMetadata("1." + std::string(kFormatKey)).has_value();
    EXPECT_EQ(again->header().metadata.size(), original->header().metadata.size() + (guarded ? 1 : 0));
    if (guarded) {
      EXPECT_TRUE(back.user_metadata.empty()) << "the guard is only added where no user metadata is";
    }
    for (const auto& [key, value] : original->header().metadata) EXPECT_EQ(again->header().FindMetadata(key), value) << key;
    testing::ExpectSameTensors(*original, *again);
    ++converted;
  }
  EXPECT_GE(converted, 10);
}

TEST(SwiftRoundTripTest, UserKeysFollowEachLayoutsRules) {
  std::unique_ptr<Env> env = NewMemEnv();
  SavePromptCacheOptions swift;
  swift.layout = PromptCacheLayout::kMlxSwiftLm;
  ASSERT_OK(SavePromptCache(env.get(), "/a", testing::SmallCache(), {{"a.b", "v"}}, swift));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(env.get(), "/a"));
  EXPECT_EQ(loaded.user_metadata, (Metadata{{"a.b", "v"}}));
  EXPECT_THAT(SavePromptCache(env.get(), "/b", testing::SmallCache(), {{"__mlx_lm_state_x", "v"}}, swift),
              HasCode(StatusCode::kInvalidArgument, "reserved by mlx-swift-lm"));
  EXPECT_THAT(SavePromptCache(env.get(), "/b", loaded.cache, loaded.user_metadata),
              HasCode(StatusCode::kInvalidArgument, "dot-free"));
}

}  // namespace
}  // namespace kvstore
