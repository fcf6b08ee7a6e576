// The two mlx-lm layouts of ArraysCache layers (docs/compat.md): files of
// mlx-lm 0.31.x (flat slot list) and of the current mlx-lm ([slots,
// left_padding, lengths]) are told apart, load alike, convert both ways to
// exactly the bytes the other version wrote, keep their layout through
// conversions, and saves write the layout asked for.
#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::Fingerprint;
using ::kvstore::testing::HasCode;

constexpr char kRelease[] = "mlx-lm/mlx-lm-v0.31.3/";
constexpr char kOlder[] = "mlx-lm/mlx-lm-v0.30.5-19-gb77ec6b9/";

std::string Fixture(const std::string& name) { return testing::FixturePath(name); }

// Converts `in` to `out` for `layout` (no digests, so headers compare with
// what mlx-lm wrote).
void Convert(const std::string& in, const std::string& out, PromptCacheLayout layout) {
  ConvertOptions options;
  options.output.layout = layout;
  options.output.integrity = false;
  ASSERT_OK(ConvertPromptCacheFile(Env::Default(), in, out, options));
}

// Same tensor names, dtypes, shapes and bytes, and the same metadata.
void ExpectSameContent(const std::string& a_path, const std::string& b_path) {
  SCOPED_TRACE(a_path + " vs " + b_path);
  ASSERT_OK_AND_ASSIGN(auto a, SafetensorsFile::Open(Env::Default(), a_path));
  ASSERT_OK_AND_ASSIGN(auto b, SafetensorsFile::Open(Env::Default(), b_path));
  testing::ExpectSameTensors(*a, *b);
  Metadata ma = a->header().metadata, mb = b->header().metadata;
  std::sort(ma.begin(), ma.end());
  std::sort(mb.begin(), mb.end());
  EXPECT_EQ(ma, mb);
}

PromptCacheLayout LayoutOf(const std::string& path) {
  Result<PromptCacheInfo> info = ReadPromptCacheInfo(Env::Default(), path);
  EXPECT_OK(info.status());
  return info.ok() ? info->layout : PromptCacheLayout::kMlxLmLegacy;
}

TEST(ArraysLayoutTest, EachFixtureReportsTheMlxLmThatWroteIt) {
  EXPECT_EQ(LayoutOf(Fixture("mlx-lm/arrayscache_basic.safetensors")), PromptCacheLayout::kMlxLm);
  EXPECT_EQ(LayoutOf(Fixture("mlx-lm/cachelist_arrays_kv.safetensors")), PromptCacheLayout::kMlxLm);
  EXPECT_EQ(LayoutOf(Fixture(std::string(kRelease) + "arrayscache_basic.safetensors")), PromptCacheLayout::kMlxLm031);
  EXPECT_EQ(LayoutOf(Fixture(std::string(kOlder) + "arrayscache_basic.safetensors")), PromptCacheLayout::kMlxLm031);
  EXPECT_EQ(LayoutOf(Fixture(std::string(kOlder) + "mambacache_kv.safetensors")), PromptCacheLayout::kMlxLm031);
  // Without an ArraysCache both versions write the same bytes.
  EXPECT_EQ(LayoutOf(Fixture(std::string(kRelease) + "cachelist_kv_rotating.safetensors")), PromptCacheLayout::kMlxLm);
  EXPECT_EQ(LayoutFromName("mlx-lm-0.31"), PromptCacheLayout::kMlxLm031);
  EXPECT_EQ(LayoutFromName("mlx-lm"), PromptCacheLayout::kMlxLm);
  EXPECT_EQ(LayoutFromName("mlx-lm-0.32"), PromptCacheLayout::kMlxLm032);
  EXPECT_EQ(LayoutFromName("mlx-lm-0.33"), std::nullopt);
}

// Both versions' files load into the same cache (the slots the sidecars of
// both fixtures record).
TEST(ArraysLayoutTest, BothLayoutsLoadAlike) {
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache current, LoadPromptCache(Env::Default(), Fixture("mlx-lm/arrayscache_basic.safetensors")));
  for (const char* dir : {kRelease, kOlder}) {
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache release,
                         LoadPromptCache(Env::Default(), Fixture(std::string(dir) + "arrayscache_basic.safetensors")));
    ASSERT_EQ(release.cache.size(), 1u);
    EXPECT_EQ(Fingerprint(*release.cache[0]), Fingerprint(*current.cache[0])) << dir;
  }
}

// Release -> current gives the bytes mlx-lm HEAD wrote, and current ->
// release the bytes mlx-lm 0.31.3 (and 0.30.5) wrote.
TEST(ArraysLayoutTest, ConvertsBothWaysToWhatTheOtherVersionWrote) {
  testing::TempDir dir;
  const std::string current = Fixture("mlx-lm/arrayscache_basic.safetensors");
  for (const char* version : {kRelease, kOlder}) {
    const std::string release = Fixture(std::string(version) + "arrayscache_basic.safetensors");
    Convert(release, dir.Join("to-current.safetensors"), PromptCacheLayout::kMlxLm);
    ExpectSameContent(dir.Join("to-current.safetensors"), current);
    Convert(current, dir.Join("to-release.safetensors"), PromptCacheLayout::kMlxLm031);
    ExpectSameContent(dir.Join("to-release.safetensors"), release);
  }
}

// A conversion keeps its input's layout unless told otherwise (here: a
// re-write that adds digests, as kvtool convert --integrity does).
TEST(ArraysLayoutTest, ConversionsKeepTheInputsLayout) {
  testing::TempDir dir;
  const std::pair<std::string, PromptCacheLayout> inputs[] = {
      {Fixture("mlx-lm/arrayscache_basic.safetensors"), PromptCacheLayout::kMlxLm},
      {Fixture(std::string(kRelease) + "arrayscache_basic.safetensors"), PromptCacheLayout::kMlxLm031},
      {Fixture(std::string(kOlder) + "mambacache_kv.safetensors"), PromptCacheLayout::kMlxLm031},
      {Fixture("mlx-lm/cachelist_arrays_kv.safetensors"), PromptCacheLayout::kMlxLm}};
  for (const auto& [path, layout] : inputs) {
    SCOPED_TRACE(path);
    ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), path));
    ConvertOptions options;
    options.output = SameFormatAs(info);
    ASSERT_OK(ConvertPromptCacheFile(Env::Default(), path, dir.Join("out.safetensors"), options));
    EXPECT_EQ(LayoutOf(dir.Join("out.safetensors")), layout);
  }
}

// CacheList children are laid out like top-level layers, both ways.
TEST(ArraysLayoutTest, CacheListWithAnArraysCacheChild) {
  testing::TempDir dir;
  const std::string current = Fixture("mlx-lm/cachelist_arrays_kv.safetensors");
  Convert(current, dir.Join("release.safetensors"), PromptCacheLayout::kMlxLm031);
  ASSERT_OK_AND_ASSIGN(auto release, SafetensorsFile::Open(Env::Default(), dir.Join("release.safetensors")));
  // mlx-lm 0.31's names: the child's slots directly under "i.0", no padding.
  for (const char* name : {"0.0.0", "0.0.1", "0.1.0", "0.1.1", "1.0.0", "1.0.1", "1.1.0", "1.1.1"}) {
    EXPECT_NE(release->header().FindTensor(name), nullptr) << name;
  }
  EXPECT_EQ(release->header().tensors.size(), 8u);
  EXPECT_EQ(LayoutOf(dir.Join("release.safetensors")), PromptCacheLayout::kMlxLm031);
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache a, LoadPromptCache(Env::Default(), current));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache b, LoadPromptCache(Env::Default(), dir.Join("release.safetensors")));
  ASSERT_EQ(a.cache.size(), b.cache.size());
  for (size_t i = 0; i < a.cache.size(); ++i) EXPECT_EQ(Fingerprint(*a.cache[i]), Fingerprint(*b.cache[i]));
  Convert(dir.Join("release.safetensors"), dir.Join("back.safetensors"), PromptCacheLayout::kMlxLm);
  ExpectSameContent(dir.Join("back.safetensors"), current);
}

class ArraysSaveTest : public ::testing::Test {
 protected:
  std::shared_ptr<ArraysCache> Arrays(std::vector<int32_t> left_padding = {}) {
    auto a = std::make_shared<ArraysCache>(2, std::move(left_padding));
    EXPECT_OK(a->SetSlot(0, testing::RandomArray(DType::kF32, {2, 3}, 1)));
    EXPECT_OK(a->SetSlot(1, testing::RandomArray(DType::kF32, {2, 5}, 2)));
    return a;
  }
  std::vector<std::string> TensorNames(const std::string& path) {
    Result<std::shared_ptr<const SafetensorsFile>> st = SafetensorsFile::Open(env_.get(), path);
    EXPECT_OK(st.status());
    std::vector<std::string> names;
    if (st.ok()) {
      for (const TensorInfo& t : (*st)->header().tensors) names.push_back(t.name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  std::unique_ptr<Env> env_ = NewMemEnv();
};

// A save from scratch writes what the released mlx-lm reads, unless asked
// for the current layout.
TEST_F(ArraysSaveTest, SavesForTheReleaseByDefault) {
  SavePromptCacheOptions plain;
  plain.integrity = false;
  ASSERT_OK(SavePromptCache(env_.get(), "/default", {Arrays()}, {}, plain));
  EXPECT_EQ(TensorNames("/default"), (std::vector<std::string>{"0.0", "0.1"}));
  plain.layout = PromptCacheLayout::kMlxLm;
  ASSERT_OK(SavePromptCache(env_.get(), "/current", {Arrays()}, {}, plain));
  EXPECT_EQ(TensorNames("/current"), (std::vector<std::string>{"0.0.0", "0.0.1", "0.1", "0.2"}));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache a, LoadPromptCache(env_.get(), "/default"));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache b, LoadPromptCache(env_.get(), "/current"));
  EXPECT_EQ(a.layout, PromptCacheLayout::kMlxLm031);
  EXPECT_EQ(b.layout, PromptCacheLayout::kMlxLm);
  EXPECT_EQ(Fingerprint(*a.cache[0]), Fingerprint(*b.cache[0]));
}

// mlx-lm 0.31 stores no padding: a cache with some is refused, not truncated.
TEST_F(ArraysSaveTest, PaddingTheReleaseCannotHoldIsRefused) {
  EXPECT_THAT(SavePromptCache(env_.get(), "/p", {Arrays({1, 0})}, {}),
              HasCode(StatusCode::kNotSupported,
                      "layer 0 (ArraysCache) cannot be saved: ArraysCache left_padding I32[2] cannot be stored in "
                      "mlx-lm 0.31's layout, which holds only the slots (save for mlx-lm, the current layout)"));
  auto list = std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{Arrays({1, 0})});
  EXPECT_THAT(SavePromptCache(env_.get(), "/p", {list}, {}),
              HasCode(StatusCode::kNotSupported, "layer 0 (CacheList) cannot be saved: CacheList child 0: "
                                                    "ArraysCache left_padding"));
  EXPECT_FALSE(env_->FileExists("/p"));
  SavePromptCacheOptions current;
  current.layout = PromptCacheLayout::kMlxLm;
  ASSERT_OK(SavePromptCache(env_.get(), "/p", {Arrays({1, 0})}, {}, current));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache back, LoadPromptCache(env_.get(), "/p"));
  EXPECT_EQ(Fingerprint(*back.cache[0]), Fingerprint(*Arrays({1, 0})));
}

// Neither mlx-lm version has MambaCache: a child is saved as ArraysCache too.
TEST_F(ArraysSaveTest, MambaCacheChildrenAreSavedAsArraysCache) {
  auto mamba = std::make_shared<MambaCache>();
  ASSERT_OK(mamba->SetSlot(0, testing::RandomArray(DType::kF32, {1, 3}, 3)));
  ASSERT_OK(mamba->SetSlot(1, testing::RandomArray(DType::kF32, {1, 4}, 4)));
  auto list = std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{mamba});
  ASSERT_OK(SavePromptCache(env_.get(), "/m", {list}, {}));
  ASSERT_OK_AND_ASSIGN(auto st, SafetensorsFile::Open(env_.get(), "/m"));
  EXPECT_EQ(st->header().FindMetadata("0.0.0.0"), "ArraysCache");
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache back, LoadPromptCache(env_.get(), "/m"));
  const auto& child = *static_cast<const CacheList&>(*back.cache[0]).child(0);
  EXPECT_EQ(child.class_name(), "ArraysCache");
}

TEST(ArraysLayoutTest, LayersThatDisagreeAreRefused) {
  std::unique_ptr<Env> env = NewMemEnv();
  const Array slot = testing::RandomArray(DType::kF32, {1, 3}, 1);
  const Array none = Array::Zeros(DType::kF32, {0});
  ASSERT_OK(testing::WriteRaw(env.get(), "/mixed",
                              {{"0.0", slot}, {"1.0.0", slot}, {"1.1", none}, {"1.2", none}},
                              {{"0.0", ""}, {"0.1", ""}, {"2.0", "ArraysCache"}, {"2.1", "ArraysCache"}}));
  EXPECT_THAT(LoadPromptCache(env.get(), "/mixed"),
              HasCode(StatusCode::kCorruption, "/mixed: layers disagree on the ArraysCache layout: layer 0 is laid "
                                               "out as mlx-lm 0.31 writes it, layer 1 as the current mlx-lm does"));
}

}  // namespace
}  // namespace kvstore
