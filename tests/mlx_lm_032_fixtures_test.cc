// Every file the real mlx-lm 0.32 wrote (fixtures/mlx-lm-0.32) parses as the
// sidecar says, scalar by scalar, and loads into the caches it holds: the
// classes, user metadata, and the content the old protocol gives for the same
// caches (the sidecar's "old_view"). fixtures/mlx-lm-0.32/README.md describes
// the sidecars.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>

#include "kvstore/json.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/safetensors.h"
#include "libkvstore/integrity/sha256.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

// How many files fixtures/mlx-lm-0.32 ships: more may come, never fewer.
constexpr size_t kShipped = 27;

std::vector<std::string> Fixtures() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(testing::FixturePath("mlx-lm-0.32"), ec)) {
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  EXPECT_GE(out.size(), kShipped) << testing::FixturePath("mlx-lm-0.32");
  return out;
}

Json Sidecar(const std::string& path) {
  return Json::Parse(testing::ReadFileString(path.substr(0, path.size() - 12) + ".json")).value();
}

std::string NumpyDtype(DType d) {
  switch (d) {
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF32: return "float32";
    case DType::kU32: return "uint32";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
    default: return std::string(DTypeName(d));
  }
}

int64_t ScalarValue(const Array& a) {
  if (a.dtype() == DType::kI64) return *a.data_as<int64_t>();
  if (a.dtype() == DType::kI32) return *a.data_as<int32_t>();
  return static_cast<int64_t>(*a.data_as<uint8_t>());
}

// One leaf of a layer's 0.32 state (sidecar "layers[i].state[j]") against the
// tensor "<layer>.<key>" of the file.
void ExpectLeaf(const SafetensorsFile& file, size_t layer, const Json& leaf) {
  const std::string name = std::to_string(layer) + "." + leaf.Find("key")->as_string();
  SCOPED_TRACE(name);
  const TensorInfo* info = file.header().FindTensor(name);
  ASSERT_NE(info, nullptr);
  ASSERT_OK_AND_ASSIGN(Array a, file.Tensor(*info));
  const std::string& kind = leaf.Find("kind")->as_string();
  if (kind == "array") {
    EXPECT_EQ(NumpyDtype(a.dtype()), leaf.Find("dtype")->as_string());
    EXPECT_EQ(a.ndim(), static_cast<int>(leaf.Find("shape")->size()));
    EXPECT_EQ(Sha256(a).ToHex(), leaf.Find("sha256")->as_string());
  } else if (kind == "scalar") {
    EXPECT_EQ(a.ndim(), 0);
    const Json& value = *leaf.Find("value");
    if (leaf.Find("type")->as_string() == "bool") {
      EXPECT_EQ(a.dtype(), DType::kBool);
      EXPECT_EQ(ScalarValue(a) != 0, value.as_bool());
    } else {
      const bool fits = value.as_int() >= INT32_MIN && value.as_int() <= INT32_MAX;
      EXPECT_EQ(a.dtype(), fits ? DType::kI32 : DType::kI64);
      EXPECT_EQ(ScalarValue(a), value.as_int());
    }
  } else if (kind == "string") {
    ASSERT_EQ(a.dtype(), DType::kI32);
    ASSERT_EQ(a.ndim(), 1);
    std::string text;  // ASCII class names: one code point, one char
    for (int64_t i = 0; i < a.numel(); ++i) text += static_cast<char>(a.data_as<int32_t>()[i]);
    EXPECT_EQ(text, leaf.Find("value")->as_string());
  } else {
    ASSERT_EQ(kind, "none");
    EXPECT_EQ(a.dtype(), DType::kF32);
    EXPECT_EQ(a.numel(), 0);
  }
}

TEST(MlxLm032FixturesTest, EveryFileHoldsWhatItsSidecarSays) {
  size_t files = 0;
  for (const std::string& path : Fixtures()) {
    SCOPED_TRACE(path);
    const Json sidecar = Sidecar(path);
    const Json& on_disk = *sidecar.Find("on_disk");
    ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), path));
    EXPECT_EQ(file->file().size(), on_disk.Find("file_size")->as_uint());
    const Json& metadata = *on_disk.Find("metadata");
    ASSERT_EQ(file->header().metadata.size(), metadata.size());
    for (const auto& [k, v] : metadata.as_object()) {
      EXPECT_EQ(file->header().FindMetadata(k), std::optional<std::string_view>(v.as_string())) << k;
    }
    for (const auto& [name, t] : on_disk.Find("tensors")->as_object()) {
      const TensorInfo* info = file->header().FindTensor(name);
      ASSERT_NE(info, nullptr) << name;
      EXPECT_EQ(DTypeName(info->dtype), t.Find("dtype")->as_string()) << name;
      ASSERT_OK_AND_ASSIGN(Array a, file->Tensor(*info));
      EXPECT_EQ(Sha256(a).ToHex(), t.Find("sha256")->as_string()) << name;
    }
    const Json& layers = *sidecar.Find("layers");
    ASSERT_EQ(layers.size(), sidecar.Find("num_layers")->as_uint());
    for (size_t i = 0; i < layers.size(); ++i) {
      for (const Json& leaf : layers.as_array()[i].Find("state")->as_array()) ExpectLeaf(*file, i, leaf);
    }
    ++files;
  }
  EXPECT_GE(files, kShipped);
}

Json MetaToJson(const MetaState& m) {
  if (m.is_string()) return Json(m.str());
  Json out = Json::MakeArray();
  for (const MetaState& c : m.list()) out.Push(MetaToJson(c));
  return out;
}

// The loaded layers against the sidecar: classes and user metadata always; the
// old protocol's meta_state, offset and state digests where it expresses them.
void ExpectSameCaches(const LoadedPromptCache& loaded, const Json& sidecar) {
  const Json& classes = *sidecar.Find("classes");
  ASSERT_EQ(loaded.cache.size(), classes.size());
  for (size_t i = 0; i < loaded.cache.size(); ++i) {
    EXPECT_EQ(loaded.cache[i]->class_name(), classes.as_array()[i].as_string()) << "layer " << i;
  }
  const Json& user = *sidecar.Find("user_metadata");
  EXPECT_EQ(loaded.user_metadata.size(), user.size());
  for (const auto& [k, v] : loaded.user_metadata) {
    ASSERT_NE(user.Find(k), nullptr) << k;
    EXPECT_EQ(user.Find(k)->as_string(), v) << k;
  }
  const Json& saved = *sidecar.Find("layers");
  for (size_t i = 0; i < loaded.cache.size(); ++i) {
    const Json* off = saved.as_array()[i].Find("offset");
    if (off == nullptr || !off->is_integer()) continue;  // an array for the batch classes
    ASSERT_TRUE(loaded.cache[i]->offset().has_value()) << "layer " << i;
    EXPECT_EQ(*loaded.cache[i]->offset(), off->as_int()) << "layer " << i;
  }
  const Json& old_view = *sidecar.Find("old_view");
  if (!old_view.Find("ok")->as_bool()) return;  // a None slot or buffer, which it cannot express
  const Json& layers = *old_view.Find("layers");
  for (size_t i = 0; i < loaded.cache.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    const Cache& c = *loaded.cache[i];
    const Json& want = layers.as_array()[i];
    EXPECT_EQ(MetaToJson(c.meta_state()).Dump(), want.Find("meta_state")->Dump());
    ASSERT_OK_AND_ASSIGN(CacheState state, c.State());
    std::map<std::string, std::string> got;
    testing::StateDigests(state, "", got);
    std::map<std::string, std::string> expected;
    for (const Json& t : want.Find("state")->as_array()) expected[t.Find("key")->as_string()] = t.Find("sha256")->as_string();
    EXPECT_EQ(got, expected);
  }
}

TEST(MlxLm032FixturesTest, EveryFileLoadsAsTheCachesMlxLmSaved) {
  size_t files = 0;
  for (const std::string& path : Fixtures()) {
    SCOPED_TRACE(path);
    const Json sidecar = Sidecar(path);
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path));
    EXPECT_EQ(loaded.layout, PromptCacheLayout::kMlxLm032);
    EXPECT_FALSE(loaded.has_digests);
    ExpectSameCaches(loaded, sidecar);
    ++files;
  }
  EXPECT_GE(files, kShipped);
}

// Saved again by kvstore in each layout the cache fits, loaded again: the same caches.
TEST(MlxLm032FixturesTest, EveryFileRoundTripsThroughKvstore) {
  testing::TempDir dir;
  size_t round_trips = 0;
  for (const std::string& path : Fixtures()) {
    SCOPED_TRACE(path);
    const Json sidecar = Sidecar(path);
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path));
    for (bool compress : {false, true}) {
      SavePromptCacheOptions options;
      options.layout = PromptCacheLayout::kMlxLm032;
      if (compress) options.compression_level = 3;
      const std::string out = dir.Join(compress ? "c.safetensors" : "p.safetensors");
      ASSERT_OK(SavePromptCache(Env::Default(), out, loaded.cache, loaded.user_metadata, options));
      LoadPromptCacheOptions verify;
      verify.verify = true;
      ASSERT_OK_AND_ASSIGN(LoadedPromptCache again, LoadPromptCache(Env::Default(), out, verify));
      EXPECT_TRUE(again.verified);
      EXPECT_EQ(again.layout, PromptCacheLayout::kMlxLm032);
      ExpectSameCaches(again, sidecar);
      for (size_t i = 0; i < loaded.cache.size(); ++i) {
        EXPECT_EQ(testing::Fingerprint(*again.cache[i]), testing::Fingerprint(*loaded.cache[i])) << "layer " << i;
      }
      ++round_trips;
    }
  }
  EXPECT_GE(round_trips, 2 * kShipped);
}

}  // namespace
}  // namespace kvstore
