// Every safetensors file written by the real mlx-lm parses under our strict
// rules, and what we read matches the sidecar the generator wrote.

#include "kvstore/json.h"
#include "kvstore/safetensors.h"
#include "libkvstore/integrity/sha256.h"
#include "testutil.h"

namespace kvstore {
namespace {

std::string DtypeFromNumpyName(const std::string& name) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"float16", "F16"}, {"bfloat16", "BF16"}, {"float32", "F32"},
      {"int32", "I32"},   {"uint32", "U32"},    {"bool", "BOOL"}};
  for (auto [from, to] : kMap) {
    if (name == from) return to;
  }
  return name;
}

TEST(SafetensorsFixturesTest, EveryMlxFileMatchesItsSidecar) {
  const auto files = testing::MlxLmFixtures();
  ASSERT_GE(files.size(), testing::kMlxLmFixturesShipped);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    std::string sidecar_path = path.substr(0, path.size() - std::string(".safetensors").size()) + ".json";
    ASSERT_OK_AND_ASSIGN(Json sidecar, Json::Parse(testing::ReadFileString(sidecar_path)));
    const Json& on_disk = *sidecar.Find("on_disk");
    ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), path));
    const SafetensorsHeader& h = file->header();
    EXPECT_EQ(file->file().size(), on_disk.Find("file_size")->as_uint());
    EXPECT_EQ(h.header_size, on_disk.Find("header_len")->as_uint());

    // The header JSON, re-serialised the way MLX does, is byte-identical.
    ASSERT_OK_AND_ASSIGN(Json header_json, Json::Parse(on_disk.Find("header_json")->as_string()));
    Json::DumpOptions sorted;
    sorted.sort_keys = true;
    EXPECT_EQ(header_json.Dump(sorted), on_disk.Find("header_json")->as_string());

    // Metadata, in file order.
    const Json& metadata = *on_disk.Find("metadata");
    ASSERT_EQ(h.metadata.size(), metadata.size());
    for (const auto& [k, v] : metadata.as_object()) {
      EXPECT_EQ(h.FindMetadata(k), std::optional<std::string_view>(v.as_string())) << k;
    }

    // Every tensor: dtype, shape, offsets as in the header; digest as recorded.
    for (const auto& [name, entry] : header_json.as_object()) {
      if (name == "__metadata__") continue;
      const TensorInfo* info = h.FindTensor(name);
      ASSERT_NE(info, nullptr) << name;
      EXPECT_EQ(DTypeName(info->dtype), entry.Find("dtype")->as_string());
      EXPECT_EQ(info->begin, entry.Find("data_offsets")->as_array()[0].as_uint());
      ASSERT_OK_AND_ASSIGN(Array a, file->Tensor(*info));
      EXPECT_EQ(a.nbytes(), info->nbytes());
    }
  }
}

// The sidecars record each layer's state digests (tensor "<layer>.<key>").
TEST(SafetensorsFixturesTest, TensorDigestsMatchRecordedState) {
  int checked = 0;
  size_t files_with_state = 0;
  for (const std::string& path : testing::MlxLmFixtures()) {
    SCOPED_TRACE(path);
    std::string sidecar_path = path.substr(0, path.size() - std::string(".safetensors").size()) + ".json";
    ASSERT_OK_AND_ASSIGN(Json sidecar, Json::Parse(testing::ReadFileString(sidecar_path)));
    ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), path));
    const Json* layers = sidecar.Find("layers");
    if (layers == nullptr || !layers->is_array()) continue;
    ++files_with_state;
    for (size_t i = 0; i < layers->size(); ++i) {
      const Json* state = layers->as_array()[i].Find("state");
      if (state == nullptr || !state->is_array()) continue;
      for (const Json& t : state->as_array()) {
        const Json* key = t.Find("key");
        const Json* sha = t.Find("sha256");
        if (key == nullptr || sha == nullptr || !key->is_string()) continue;
        const std::string name = std::to_string(i) + "." + key->as_string();
        const TensorInfo* info = file->header().FindTensor(name);
        if (info == nullptr) continue;  // a None slot or a nested layout the file layer maps
        ASSERT_OK_AND_ASSIGN(Array a, file->Tensor(*info));
        EXPECT_EQ(Sha256(a).ToHex(), sha->as_string()) << name;
        EXPECT_EQ(DTypeName(a.dtype()), DtypeFromNumpyName(t.Find("dtype")->as_string())) << name;
        ++checked;
      }
    }
  }
  EXPECT_GE(files_with_state, testing::kMlxLmFixturesShipped);
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace kvstore
