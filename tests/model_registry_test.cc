#include "kvstore/model_registry.h"

#include <atomic>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;
using testing::Prefill;
using testing::TempDir;

PromptCache Kv(int layers) {
  PromptCache out;
  for (int i = 0; i < layers; ++i) {
    auto kv = std::make_shared<KVCache>();
    Prefill(*kv, 4, 4, i);
    out.push_back(kv);
  }
  return out;
}

PromptCache Quantized() {
  auto q = std::make_shared<QuantizedKVCache>(32, 4);
  Prefill(*q, 4, 4, 1);
  return {q};
}

// A registry over `dir` that collects its warnings.
struct Registry {
  explicit Registry(const std::string& dir) : models({.directory = dir, .warn = [this](const std::string& w) {
                                                        warnings.push_back(w);
                                                      }}) {}
  std::vector<std::string> warnings;
  ModelRegistry models;
};

void WriteText(const std::string& path, const std::string& text) {
  ASSERT_OK(WriteStringAtomic(Env::Default(), path, std::as_bytes(std::span(text))));
}

TEST(ModelRegistryTest, LearnsAndFindsInMemory) {
  Registry r("");
  EXPECT_EQ(r.models.Find("m"), std::nullopt);
  ASSERT_OK_AND_ASSIGN(ModelFingerprint kv, r.models.Learn("m", Kv(2)));
  EXPECT_EQ(kv.model_id(), "m");
  EXPECT_EQ(r.models.Find("m"), kv);
  ASSERT_OK_AND_ASSIGN(ModelFingerprint again, r.models.Learn("m", Kv(2)));
  EXPECT_EQ(again, kv);
  // The model now makes other caches: what it makes now is served.
  ASSERT_OK_AND_ASSIGN(ModelFingerprint q, r.models.Learn("m", Quantized()));
  EXPECT_NE(q, kv);
  EXPECT_EQ(r.models.Find("m"), q);
  EXPECT_EQ(r.models.Find("other"), std::nullopt);
  EXPECT_THAT(r.models.Learn("m", {std::make_shared<KVCache>()}), HasCode(StatusCode::kNotSupported, "no state"));
  EXPECT_EQ(r.models.Find("m"), q);  // a failed Learn changes nothing
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ModelRegistryTest, ARestartFindsWhatTheDirectoryRemembers) {
  TempDir tmp;
  ModelFingerprint kv = [&] {
    Registry first(tmp.path());
    return first.models.Learn("m", Kv(2)).value();
  }();
  const std::string text = testing::ReadFileString(tmp.Join(kModelsFileName));
  EXPECT_NE(text.find("\"version\":1"), std::string::npos) << text;
  Registry restarted(tmp.path());
  EXPECT_EQ(restarted.models.Find("m"), kv);
  EXPECT_TRUE(restarted.warnings.empty());
}

TEST(ModelRegistryTest, ServersOfOneDirectoryKeepEachOthersModels) {
  TempDir tmp;
  Registry a(tmp.path()), b(tmp.path());
  EXPECT_EQ(b.models.Find("m"), std::nullopt);
  ASSERT_OK_AND_ASSIGN(ModelFingerprint m, a.models.Learn("m", Kv(2)));
  EXPECT_EQ(b.models.Find("m"), m);  // the file changed: read again
  ASSERT_OK_AND_ASSIGN(ModelFingerprint n, b.models.Learn("n", Quantized()));
  Registry c(tmp.path());
  EXPECT_EQ(c.models.Find("m"), m);  // b's write kept a's model
  EXPECT_EQ(c.models.Find("n"), n);
  EXPECT_EQ(a.models.Find("n"), n);
}

TEST(ModelRegistryTest, ABrokenOrHostileFileIsIgnoredAndWarned) {
  TempDir tmp;
  const std::string good = [&] {
    Registry first(tmp.path());
    (void)first.models.Learn("m", Kv(1)).value();
    return testing::ReadFileString(tmp.Join(kModelsFileName));
  }();
  std::string renamed = good;
  renamed.replace(renamed.find("\"m\""), 3, "\"x\"");  // a structure stored under another model's name
  const std::vector<std::string> bad = {"{not json", R"({"version": 1, "models": {"x": "{}"}})", "[]",
                                        std::string(100, '\xff'), R"({"version": 2, "models": {}})",
                                        R"({"version": 1, "models": {"m": 7}})", renamed};
  for (const std::string& text : bad) {
    WriteText(tmp.Join(kModelsFileName), text);
    Registry r(tmp.path());
    EXPECT_EQ(r.models.Find("m"), std::nullopt) << text;
    EXPECT_EQ(r.models.Find("x"), std::nullopt) << text;
    ASSERT_FALSE(r.warnings.empty()) << text;
    EXPECT_NE(r.warnings[0].find("ignoring"), std::string::npos) << r.warnings[0];
  }
  // Larger than the bound: refused unread.
  WriteText(tmp.Join(kModelsFileName), std::string((16 << 20) + 1, ' '));
  Registry big(tmp.path());
  EXPECT_EQ(big.models.Find("m"), std::nullopt);
  ASSERT_EQ(big.warnings.size(), 1u);
  // A learned model replaces the broken file with a good one.
  ASSERT_OK_AND_ASSIGN(ModelFingerprint m, big.models.Learn("m", Kv(1)));
  Registry after(tmp.path());
  EXPECT_EQ(after.models.Find("m"), m);
  EXPECT_TRUE(after.warnings.empty());
}

TEST(ModelRegistryTest, AFailedWriteIsWarnedAndMemoryStillKnows) {
  TempDir tmp;
  Registry r(tmp.Join("missing/dir"));
  ASSERT_OK_AND_ASSIGN(ModelFingerprint m, r.models.Learn("m", Kv(1)));
  EXPECT_EQ(r.models.Find("m"), m);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("cannot record"), std::string::npos) << r.warnings[0];
}

TEST(ModelRegistryTest, ModelIdsComeFromContentOncePerKey) {
  TempDir tmp;
  for (const char* where : {"a", "b"}) {
    ASSERT_OK(Env::Default()->CreateDir(tmp.Join(where)));
    WriteText(tmp.Join(std::string(where) + "/model.safetensors"), "the same weights");
  }
  Registry r(tmp.Join("store"));
  ASSERT_OK(Env::Default()->CreateDir(tmp.Join("store")));
  auto key = [&](const char* where) {
    Json k = Json::MakeArray();
    k.Push(Json(tmp.Join(where)));
    k.Push(Json());
    k.Push(Json());
    return k;
  };
  ASSERT_OK_AND_ASSIGN(std::string a, r.models.ModelId(key("a")));
  ASSERT_OK_AND_ASSIGN(std::string b, r.models.ModelId(key("b")));
  EXPECT_EQ(a, b);
  EXPECT_EQ(r.models.files_hashed(), 2);
  ASSERT_OK(r.models.ModelId(key("a")));
  EXPECT_EQ(r.models.files_hashed(), 2);  // once per key
  // A new process on the same directory reads no weights again.
  Registry restarted(tmp.Join("store"));
  ASSERT_OK_AND_ASSIGN(std::string again, restarted.models.ModelId(key("b")));
  EXPECT_EQ(again, a);
  EXPECT_EQ(restarted.models.files_hashed(), 0);
  // A key with no identity is an error, remembered and warned once.
  Json object = Json::MakeObject();
  EXPECT_THAT(r.models.ModelId(object), HasCode(StatusCode::kInvalidArgument, ""));
  EXPECT_THAT(r.models.ModelId(object), HasCode(StatusCode::kInvalidArgument, ""));
  EXPECT_EQ(r.warnings.size(), 1u);
}

// Threads learning, finding and naming models at once (run under TSan in
// CI): every Find answers a fingerprint some thread learned, and the file
// ends up naming every model.
TEST(ModelRegistryTest, ConcurrentCallsAgree) {
  TempDir tmp;
  Registry r(tmp.path());
  const ModelFingerprint kv = ModelFingerprint::Of("m0", Kv(1)).value();
  const ModelFingerprint q = ModelFingerprint::Of("m1", Quantized()).value();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string id = (i + t) % 2 == 0 ? "m0" : "m1";
        Result<ModelFingerprint> learned = r.models.Learn(id, id == "m0" ? Kv(1) : Quantized());
        if (!learned.ok() || *learned != (id == "m0" ? kv : q)) ++wrong;
        std::optional<ModelFingerprint> found = r.models.Find(id == "m0" ? "m1" : "m0");
        if (found && *found != (id == "m0" ? q : kv)) ++wrong;
        Json key = Json::MakeArray();
        key.Push(Json("hub/repo-" + std::to_string(i % 3)));
        if (!r.models.ModelId(key).ok()) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  Registry after(tmp.path());
  EXPECT_EQ(after.models.Find("m0"), kv);
  EXPECT_EQ(after.models.Find("m1"), q);
}

}  // namespace
}  // namespace kvstore
