// Prompt-cache files: every file the real mlx-lm wrote loads into the same
// caches mlx-lm read back; our files round-trip; corruption never returns data.
#include "kvstore/prompt_cache_file.h"

#include <filesystem>

#include "kvstore/json.h"
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/integrity/sha256.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

Json MetaToJson(const MetaState& m) {
  if (m.is_string()) return Json(m.str());
  Json out = Json::MakeArray();
  for (const MetaState& c : m.list()) out.Push(MetaToJson(c));
  return out;
}

using ::kvstore::testing::MlxLmFixtures;
using ::kvstore::testing::SmallCache;

Json Sidecar(const std::string& path) {
  return Json::Parse(testing::ReadFileString(path.substr(0, path.size() - 12) + ".json")).value();
}

// Compares loaded layers with what mlx-lm read back (sidecar "reload").
void ExpectMatchesReload(const PromptCache& cache, const Json& reload, const std::string& what) {
  const Json& layers = *reload.Find("layers");
  ASSERT_EQ(cache.size(), layers.size()) << what;
  for (size_t i = 0; i < cache.size(); ++i) {
    SCOPED_TRACE(what + " layer " + std::to_string(i));
    const Json& want = layers.as_array()[i];
    EXPECT_EQ(cache[i]->class_name(), want.Find("class")->as_string());
    EXPECT_EQ(MetaToJson(cache[i]->meta_state()), *want.Find("meta_state"));
    if (const Json* off = want.Find("offset"); off && off->is_integer()) {
      ASSERT_TRUE(cache[i]->offset().has_value());
      EXPECT_EQ(*cache[i]->offset(), off->as_int());
    }
    ASSERT_OK_AND_ASSIGN(CacheState state, cache[i]->State());
    std::map<std::string, std::string> got;
    testing::StateDigests(state, "", got);
    for (const Json& t : want.Find("state")->as_array()) {
      const std::string key = t.Find("key")->as_string();
      ASSERT_TRUE(got.count(key)) << key;
      EXPECT_EQ(got[key], t.Find("sha256")->as_string()) << key;
    }
  }
}

TEST(PromptCacheFileTest, LoadsEveryMlxLmFixtureAsMlxLmDid) {
  size_t loaded_files = 0;
  for (const std::string& path : MlxLmFixtures()) {
    SCOPED_TRACE(path);
    const Json sidecar = Sidecar(path);
    const Json& reload = *sidecar.Find("reload");
    if (!reload.Find("ok")->as_bool()) continue;
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path));
    EXPECT_EQ(loaded.layout, PromptCacheLayout::kMlxLm);
    EXPECT_FALSE(loaded.has_digests);
    ExpectMatchesReload(loaded.cache, reload, path);
    const Json& user = *reload.Find("user_metadata");
    EXPECT_EQ(loaded.user_metadata.size(), user.size());
    for (const auto& [k, v] : loaded.user_metadata) EXPECT_EQ(user.Find(k)->as_string(), v) << k;
    ++loaded_files;
  }
  EXPECT_GE(loaded_files, testing::kMlxLmFixturesShipped);
}

TEST(PromptCacheFileTest, RoundTripsEveryFixtureWithAndWithoutCompression) {
  testing::TempDir dir;
  size_t round_trips = 0;
  for (const std::string& path : MlxLmFixtures()) {
    SCOPED_TRACE(path);
    const Json sidecar = Sidecar(path);
    const Json& reload = *sidecar.Find("reload");
    if (!reload.Find("ok")->as_bool()) continue;
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path));
    for (bool compress : {false, true}) {
      SavePromptCacheOptions options;
      if (compress) options.compression_level = 3;
      const std::string out = dir.Join(compress ? "c.safetensors.zst" : "p.safetensors");
      ASSERT_OK(SavePromptCache(Env::Default(), out, loaded.cache, loaded.user_metadata, options));
      LoadPromptCacheOptions verify;
      verify.verify = true;
      ASSERT_OK_AND_ASSIGN(LoadedPromptCache again, LoadPromptCache(Env::Default(), out, verify));
      EXPECT_TRUE(again.verified);
      EXPECT_EQ(again.compressed, compress);
      EXPECT_EQ(again.user_metadata, loaded.user_metadata);
      ExpectMatchesReload(again.cache, reload, out);
      ++round_trips;
    }
  }
  EXPECT_GE(round_trips, 2 * testing::kMlxLmFixturesShipped);
}

// Zeros compress about 30000x; such a file must not look like a bomb.
TEST(PromptCacheFileTest, CompressedZerosLoad) {
  testing::TempDir dir;
  const Array zeros = Array::Zeros(DType::kBF16, {1, 8, 4096, 128});
  auto kv = std::make_shared<KVCache>();
  ASSERT_OK(kv->UpdateAndFetch(zeros, zeros).status());
  SavePromptCacheOptions options;
  options.compression_level = 3;
  const std::string out = dir.Join("zeros.safetensors");
  ASSERT_OK(SavePromptCache(Env::Default(), out, {kv}, {}, options));
  LoadPromptCacheOptions verify;
  verify.verify = true;
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache again, LoadPromptCache(Env::Default(), out, verify));
  EXPECT_TRUE(again.compressed);
  EXPECT_EQ(again.cache[0]->offset(), 4096);
}

// A compression level outside libzstd's range is refused (zstd would clamp
// it silently), by saves and container-only conversions alike.
TEST(PromptCacheFileTest, ZstdLevelsOutsideTheLibrarysRangeAreRefused) {
  std::unique_ptr<Env> env = NewMemEnv();
  const ZstdLevelRange levels = ZstdLevels();
  EXPECT_EQ(levels.max, 22);
  EXPECT_LT(levels.min, 0);
  EXPECT_OK(CheckZstdLevel(levels.max));
  ASSERT_OK(SavePromptCache(env.get(), "/in", SmallCache(), {}));
  for (int level : {levels.max + 1, levels.min - 1, 99}) {
    SavePromptCacheOptions options;
    options.compression_level = level;
    const std::string want = "zstd level " + std::to_string(level) + " outside [" + std::to_string(levels.min) + ", 22]";
    EXPECT_THAT(SavePromptCache(env.get(), "/out", SmallCache(), {}, options), HasCode(StatusCode::kInvalidArgument, want));
    TranscodeOptions transcode;
    transcode.compression_level = level;
    EXPECT_THAT(TranscodePromptCacheFile(env.get(), "/in", "/out", transcode), HasCode(StatusCode::kInvalidArgument, want));
    EXPECT_FALSE(env->FileExists("/out"));
  }
}

TEST(PromptCacheFileTest, WritesTheSameHeaderKeysAsMlxLm) {
  testing::TempDir dir;
  const std::string path = testing::FixturePath("mlx-lm/kvcache_f16_4l.safetensors");
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path));
  SavePromptCacheOptions plain;
  plain.integrity = false;
  ASSERT_OK(SavePromptCache(Env::Default(), dir.Join("x.safetensors"), loaded.cache, loaded.user_metadata, plain));
  ASSERT_OK_AND_ASSIGN(auto ours, SafetensorsFile::Open(Env::Default(), dir.Join("x.safetensors")));
  ASSERT_OK_AND_ASSIGN(auto theirs, SafetensorsFile::Open(Env::Default(), path));
  auto names = [](const SafetensorsHeader& h) {
    std::set<std::string> s;
    for (const auto& t : h.tensors) s.insert(t.name + ":" + std::string(DTypeName(t.dtype)) + ShapeToString(t.shape));
    for (const auto& [k, v] : h.metadata) s.insert(k + "=" + v);
    return s;
  };
  EXPECT_EQ(names(ours->header()), names(theirs->header()));
}

TEST(PromptCacheFileTest, InfoReadsOnlyTheHeader) {
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info,
                       ReadPromptCacheInfo(Env::Default(), testing::FixturePath("mlx-lm/cachelist_kv_rotating.safetensors")));
  ASSERT_EQ(info.layers.size(), 2u);
  EXPECT_EQ(info.layers[0].class_name, "CacheList");
  ASSERT_EQ(info.layers[0].children.size(), 2u);
  EXPECT_EQ(info.layers[0].children[1].class_name, "RotatingKVCache");
  EXPECT_EQ(info.layers[0].children[1].tensors.size(), 2u);
  EXPECT_FALSE(info.compression.has_value());
}

TEST(PromptCacheFileTest, EveryFlippedByteFailsVerifiedLoad) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK(SavePromptCache(env.get(), "/f.safetensors", SmallCache(), {{"model", "m"}}));
  ASSERT_OK_AND_ASSIGN(auto file, env->OpenReadable("/f.safetensors"));
  const std::vector<std::byte> good(file->data().begin(), file->data().end());
  LoadPromptCacheOptions verify;
  verify.verify = true;
  ASSERT_OK(LoadPromptCache(env.get(), "/f.safetensors", verify));
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<std::byte> bad = good;
    bad[i] ^= std::byte{0x10};
    ASSERT_OK(WriteStringAtomic(env.get(), "/bad.safetensors", bad));
    Result<LoadedPromptCache> r = LoadPromptCache(env.get(), "/bad.safetensors", verify);
    ASSERT_FALSE(r.ok()) << "flip at byte " << i << " of " << good.size() << " loaded";
  }
}

TEST(PromptCacheFileTest, FailedWritesLeaveTheOldFile) {
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  ASSERT_OK(SavePromptCache(&env, "/d/f.safetensors", SmallCache(), {}));
  ASSERT_OK_AND_ASSIGN(auto before, env.OpenReadable("/d/f.safetensors"));
  const std::vector<std::byte> old(before->data().begin(), before->data().end());
  for (auto op : {FaultInjectionEnv::Op::kAppend, FaultInjectionEnv::Op::kWriteAt, FaultInjectionEnv::Op::kSync,
                  FaultInjectionEnv::Op::kRename}) {
    env.Reset();
    env.FailNth(op, 1, Status::IOError("injected ENOSPC"));
    PromptCache other = SmallCache();
    EXPECT_THAT(SavePromptCache(&env, "/d/f.safetensors", {other[0]}, {{"x", "y"}}),
                HasCode(StatusCode::kIOError, "ENOSPC"));
    ASSERT_OK_AND_ASSIGN(auto after, env.OpenReadable("/d/f.safetensors"));
    EXPECT_TRUE(std::equal(old.begin(), old.end(), after->data().begin(), after->data().end()));
  }
}

TEST(PromptCacheFileTest, RejectsCachesAndKeysMlxLmCannotRead) {
  std::unique_ptr<Env> env = NewMemEnv();
  PromptCache empty = {std::make_shared<KVCache>()};
  EXPECT_THAT(SavePromptCache(env.get(), "/e", empty, {}), HasCode(StatusCode::kInvalidArgument, "cannot be saved"));
  for (const char* key : {"a.b", "", "12", "kvstore_sha256_header"}) {
    EXPECT_THAT(SavePromptCache(env.get(), "/k", SmallCache(), {{key, "v"}}),
                HasCode(StatusCode::kInvalidArgument, "user metadata key")) << key;
  }
}

TEST(PromptCacheFileTest, HostileLayoutsGetClearErrors) {
  std::unique_ptr<Env> env = NewMemEnv();
  auto write = [&](const std::vector<NamedArray>& tensors, const Metadata& md) {
    EXPECT_OK(WriteFileAtomic(env.get(), "/h", [&](WritableFile& f) { return WriteSafetensors(f, tensors, md); }));
  };
  Array k = Array::Zeros(DType::kF16, {1, 1, 2, 4});
  write({{"0.0", k}, {"0.1", k}}, {{"2.0", "NoSuchCache"}, {"0.0", ""}});
  EXPECT_THAT(LoadPromptCache(env.get(), "/h"), HasCode(StatusCode::kNotSupported, "NoSuchCache"));
  write({{"0.0", k}, {"0.1", k}}, {{"2.0", "RotatingKVCache"}, {"0.0.0", "x"}, {"0.0.1", "4"}, {"0.0.2", "2"}, {"0.0.3", "2"}});
  EXPECT_THAT(LoadPromptCache(env.get(), "/h"), HasCode(StatusCode::kCorruption, "not an integer"));
  write({{"0.0", k}}, {{"2.0", "KVCache"}, {"0.0", ""}});
  EXPECT_THAT(LoadPromptCache(env.get(), "/h"), HasCode(StatusCode::kCorruption, "2 arrays"));
  write({{"0.0", k}, {"0.1", k}, {"1.0", k}}, {{"2.0", "KVCache"}, {"0.0", ""}});
  EXPECT_THAT(LoadPromptCache(env.get(), "/h"), HasCode(StatusCode::kCorruption, "class names"));
  write({{"0.0", k}, {"0.1", k}}, {{"kvstore.sha256", "x"}, {"2.0", "KVCache"}});
  EXPECT_THAT(LoadPromptCache(env.get(), "/h"), HasCode(StatusCode::kNotSupported, "unknown prompt-cache layout"));
  write({{"0.0", k}, {"0.1", k}}, {{"0.0", ""}});
  EXPECT_THAT(LoadPromptCache(env.get(), "/h"), HasCode(StatusCode::kNotSupported, "no class names"));
}

TEST(PromptCacheFileTest, ReadsTheFirstCachePromptFormat) {
  std::unique_ptr<Env> env = NewMemEnv();
  Array k = testing::RandomArray(DType::kF16, {1, 2, 3, 4}, 3);
  const std::vector<NamedArray> tensors = {{"0_keys", k}, {"0_values", k}, {"1_keys", k}, {"1_values", k}};
  const Metadata md = {{"model", "m"}, {"max_kv_size", "None"}};
  EXPECT_OK(WriteFileAtomic(env.get(), "/legacy", [&](WritableFile& f) { return WriteSafetensors(f, tensors, md); }));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(env.get(), "/legacy"));
  EXPECT_EQ(loaded.layout, PromptCacheLayout::kMlxLmLegacy);
  ASSERT_EQ(loaded.cache.size(), 2u);
  EXPECT_EQ(loaded.cache[1]->offset(), 3);
}

}  // namespace
}  // namespace kvstore
