// Model identity from content: copies at other paths share it, a changed
// weight file does not, digests are remembered by path, size and mtime, and
// the cache file is a hint that a hostile copy cannot break.
#include "kvstore/model_identity.h"

#include <filesystem>
#include <fstream>

#include "libkvstore/integrity/sha256.h"
#include "testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;
using testing::TempDir;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A model folder as mlx-lm loads it: weights, config, tokenizer, and files
// that are not the model (a README, a hidden file, a subfolder).
void MakeModel(const std::string& dir, const std::string& weights) {
  std::filesystem::create_directories(dir + "/sub");
  WriteText(dir + "/model.safetensors", weights);
  WriteText(dir + "/config.json", R"({"model_type": "llama"})");
  WriteText(dir + "/tokenizer.json", R"({"vocab": {}})");
  WriteText(dir + "/README.md", "# a model card");
  WriteText(dir + "/.DS_Store", "noise");
  WriteText(dir + "/sub/model.safetensors", "ignored: not directly in the folder");
}

Json Key(const std::string& model_path) {
  Json key = Json::MakeArray();
  key.Push(Json(model_path));
  key.Push(Json());
  key.Push(Json());
  return key;
}

TEST(ModelIdentity, ACopyAtAnotherPathIsTheSameModel) {
  TempDir tmp;
  MakeModel(tmp.Join("a"), "weights-1");
  MakeModel(tmp.Join("elsewhere/b"), "weights-1");
  WriteText(tmp.Join("elsewhere/b/README.md"), "another model card");  // not part of the model
  ModelContentDigests digests(Env::Default(), "");
  ASSERT_OK_AND_ASSIGN(std::string a, ModelIdOfKey(Key(tmp.Join("a")), digests));
  ASSERT_OK_AND_ASSIGN(std::string b, ModelIdOfKey(Key(tmp.Join("elsewhere/b")), digests));
  EXPECT_EQ(a, b);
  EXPECT_TRUE(a.starts_with(std::string(kModelIdPrefix) + "[\"sha256:")) << a;
  EXPECT_TRUE(a.ends_with("\",null,null]")) << a;
  EXPECT_EQ(a.find(tmp.path()), std::string::npos) << "the path is not part of the identity: " << a;
}

TEST(ModelIdentity, AChangedWeightConfigOrTokenizerFileIsAnotherModel) {
  TempDir tmp;
  MakeModel(tmp.Join("m"), "weights-1");
  ModelContentDigests digests(Env::Default(), "");
  ASSERT_OK_AND_ASSIGN(std::string before, digests.Of(tmp.Join("m")));
  for (const char* file : {"model.safetensors", "config.json", "tokenizer.json"}) {
    SCOPED_TRACE(file);
    TempDir other;
    MakeModel(other.Join("m"), "weights-1");
    WriteText(other.Join("m/") + file, "changed");
    ASSERT_OK_AND_ASSIGN(std::string after, digests.Of(other.Join("m")));
    EXPECT_NE(before, after);
  }
  // Same size, same path, new content and mtime: not served from the cache.
  std::filesystem::last_write_time(tmp.Join("m/model.safetensors"),
                                   std::filesystem::last_write_time(tmp.Join("m/model.safetensors")) -
                                       std::chrono::seconds(10));
  ASSERT_OK_AND_ASSIGN(std::string aged, digests.Of(tmp.Join("m")));
  EXPECT_EQ(aged, before);
  WriteText(tmp.Join("m/model.safetensors"), "weights-2");
  ASSERT_OK_AND_ASSIGN(std::string rewritten, digests.Of(tmp.Join("m")));
  EXPECT_NE(rewritten, before);
}

TEST(ModelIdentity, TheDigestIsTheListingOfNamesSizesAndContentDigests) {
  TempDir tmp;
  WriteText(tmp.Join("model.safetensors"), "w");
  WriteText(tmp.Join("config.json"), "{}");
  ModelContentDigests digests(Env::Default(), "");
  ASSERT_OK_AND_ASSIGN(std::string got, digests.Of(tmp.path()));
  const std::string listing = std::string("kvstore-model-content/1\n") + "config.json" + '\0' + "2" + '\0' +
                              Sha256(std::string_view("{}")).ToHex() + '\n' + "model.safetensors" + '\0' + "1" +
                              '\0' + Sha256(std::string_view("w")).ToHex() + '\n';
  EXPECT_EQ(got, "sha256:" + Sha256(listing).ToHex());
  // One file: its own listing.
  ASSERT_OK_AND_ASSIGN(std::string file, digests.Of(tmp.Join("model.safetensors")));
  EXPECT_EQ(file, "sha256:" + Sha256(std::string("kvstore-model-content/1\nmodel.safetensors") + '\0' + "1" +
                                     '\0' + Sha256(std::string_view("w")).ToHex() + '\n')
                                  .ToHex());
}

TEST(ModelIdentity, DigestsAreRememberedAcrossProcessesByPathSizeAndMtime) {
  TempDir tmp;
  MakeModel(tmp.Join("m"), "weights-1");
  const std::string cache = tmp.Join("kvstore-model-digests.json");
  std::string first;
  {
    ModelContentDigests digests(Env::Default(), cache);
    ASSERT_OK_AND_ASSIGN(first, digests.Of(tmp.Join("m")));
    EXPECT_EQ(digests.files_hashed(), 3);
    ASSERT_OK_AND_ASSIGN(std::string again, digests.Of(tmp.Join("m")));
    EXPECT_EQ(again, first);
    EXPECT_EQ(digests.files_hashed(), 3) << "the second call reads no file";
  }
  ModelContentDigests restarted(Env::Default(), cache);
  ASSERT_OK_AND_ASSIGN(std::string after_restart, restarted.Of(tmp.Join("m")));
  EXPECT_EQ(after_restart, first);
  EXPECT_EQ(restarted.files_hashed(), 0) << "a restart reads the weights again";
}

TEST(ModelIdentity, AHostileCacheFileIsIgnored) {
  TempDir tmp;
  MakeModel(tmp.Join("m"), "weights-1");
  const std::string cache = tmp.Join("digests.json");
  ModelContentDigests clean(Env::Default(), "");
  ASSERT_OK_AND_ASSIGN(std::string truth, clean.Of(tmp.Join("m")));
  for (const std::string& text :
       {std::string("not json"), std::string("[]"), std::string(R"({"version": 2, "files": {}})"),
        std::string(R"({"version": 1, "files": {"x": {"size": -1, "mtime_ns": 0, "sha256": "00"}}})"),
        std::string(R"({"version": 1, "files": {"x": {"size": 1, "mtime_ns": 0, "sha256": "ZZ"}}})"),
        std::string(R"({"version": 1, "files": []})"), std::string(1 << 10, '{')}) {
    SCOPED_TRACE(text.substr(0, 60));
    WriteText(cache, text);
    ModelContentDigests digests(Env::Default(), cache);
    ASSERT_OK_AND_ASSIGN(std::string got, digests.Of(tmp.Join("m")));
    EXPECT_EQ(got, truth);
    EXPECT_EQ(digests.files_hashed(), 3);
  }
  // A cache file that is a directory is no cache (and is left alone).
  std::filesystem::remove(cache);
  std::filesystem::create_directory(cache);
  ModelContentDigests digests(Env::Default(), cache);
  ASSERT_OK_AND_ASSIGN(std::string got, digests.Of(tmp.Join("m")));
  EXPECT_EQ(got, truth);
  EXPECT_TRUE(std::filesystem::is_directory(cache));
}

TEST(ModelIdentity, KeysKeepWhatIsNotALocalPath) {
  TempDir tmp;
  ModelContentDigests digests(Env::Default(), "");
  ASSERT_OK_AND_ASSIGN(Json key, Json::Parse(R"(["mlx-community/Llama-3.2-1B-Instruct-4bit", null, 3, 1.5, true, ""])"));
  ASSERT_OK_AND_ASSIGN(std::string id, ModelIdOfKey(key, digests));
  EXPECT_EQ(id, "kvstore-model/3:[\"mlx-community/Llama-3.2-1B-Instruct-4bit\",null,3,1.5,true,\"\"]");
  // A path below a file is no path either.
  WriteText(tmp.Join("file"), "x");
  ASSERT_OK_AND_ASSIGN(std::string below, ModelIdOfKey(Json(tmp.Join("file/below")), digests));
  EXPECT_EQ(below, std::string(kModelIdPrefix) + "\"" + tmp.Join("file/below") + "\"");
  ASSERT_OK_AND_ASSIGN(Json object, Json::Parse(R"([{"a": 1}])"));
  EXPECT_THAT(ModelIdOfKey(object, digests), HasCode(StatusCode::kInvalidArgument, "holds no objects"));
}

}  // namespace
}  // namespace kvstore
