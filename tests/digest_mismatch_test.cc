// One message for a failed digest check (DigestMismatch::Message), whoever
// finds it: VerifyPromptCacheFile, a verified load or layer read, a
// conversion that checks its input, VerifyReport::ToStatus.
#include "kvstore/prompt_cache_file.h"
#include "libkvstore/integrity/sha256.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::FileBytes;
using ::kvstore::testing::HasCode;

Sha256Digest DigestOf(std::string_view text) { return Sha256(text); }

TEST(DigestMismatchTest, MessageShapes) {
  const Sha256Digest a = DigestOf("a"), b = DigestOf("b");
  EXPECT_EQ(a.ToHex().substr(0, 16), "ca978112ca1bbdca");
  EXPECT_EQ(b.ToHex().substr(0, 16), "3e23e8160039594a");
  EXPECT_EQ((DigestMismatch{"0.1", a, b}.Message("prompt.safetensors")),
            "prompt.safetensors: tensor '0.1': SHA-256 mismatch: expected ca978112ca1bbdca..., found "
            "3e23e8160039594a...");
  EXPECT_EQ((DigestMismatch{"", a, b}.Message("p")),
            "p: the header: SHA-256 mismatch: expected ca978112ca1bbdca..., found 3e23e8160039594a...");
  EXPECT_EQ((DigestMismatch{"3.0", std::nullopt, b}.Message("p")),
            "p: tensor '3.0': SHA-256 mismatch: expected (no valid digest stored), found 3e23e8160039594a...");
  EXPECT_EQ((DigestMismatch{"9.0", a, std::nullopt}.Message("p")),
            "p: tensor '9.0': SHA-256 mismatch: expected ca978112ca1bbdca..., found (no such tensor)");
}

TEST(DigestMismatchTest, ToStatus) {
  VerifyReport many;
  EXPECT_THAT(many.ToStatus("p"), HasCode(StatusCode::kFailedPrecondition, "p: the file carries no digests to verify"));
  many.has_digests = true;
  EXPECT_OK(many.ToStatus("p"));
  for (int i = 0; i < 10; ++i) {
    many.mismatches.push_back({std::to_string(i) + ".0", DigestOf("a"), DigestOf("b")});
  }
  const Status s = many.ToStatus("p");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  std::string want;
  for (int i = 0; i < 8; ++i) want += many.mismatches[i].Message("p") + "\n";
  EXPECT_EQ(std::string(s.message()), want + "p: 2 more digest mismatches");
}

class CorruptFileTest : public ::testing::Test {
 protected:
  // Saves SmallCache with digests as /f and flips one byte of tensor "0.1".
  void SetUp() override {
    ASSERT_OK(SavePromptCache(env_.get(), "/f", testing::SmallCache(), {{"model", "m"}}));
    ASSERT_OK_AND_ASSIGN(auto st, SafetensorsFile::Open(env_.get(), "/f"));
    const TensorInfo* t = st->header().FindTensor("0.1");
    ASSERT_NE(t, nullptr);
    std::vector<std::byte> bytes = FileBytes(env_.get(), "/f");
    const size_t at = st->header().data_offset() + t->begin;
    stored_ = Sha256(std::span<const std::byte>(bytes).subspan(at, t->nbytes()));
    bytes[at + 3] ^= std::byte{1};
    found_ = Sha256(std::span<const std::byte>(bytes).subspan(at, t->nbytes()));
    ASSERT_OK(WriteStringAtomic(env_.get(), "/f", bytes));
  }
  std::unique_ptr<Env> env_ = NewMemEnv();
  Sha256Digest stored_, found_;
};

TEST_F(CorruptFileTest, EveryCheckSaysTheSame) {
  ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(env_.get(), "/f"));
  ASSERT_EQ(report.mismatches.size(), 1u);
  const DigestMismatch& m = report.mismatches[0];
  EXPECT_EQ(m.tensor, "0.1");
  EXPECT_EQ(m.expected, stored_);
  EXPECT_EQ(m.found, found_);
  const std::string message = m.Message("/f");
  EXPECT_EQ(message, "/f: tensor '0.1': SHA-256 mismatch: expected " + stored_.ToHex().substr(0, 16) +
                         "..., found " + found_.ToHex().substr(0, 16) + "...");
  EXPECT_EQ(std::string(report.ToStatus("/f").message()), message);

  LoadPromptCacheOptions verify;
  verify.verify = true;
  Result<LoadedPromptCache> load = LoadPromptCache(env_.get(), "/f", verify);
  EXPECT_THAT(load, HasCode(StatusCode::kCorruption, ""));
  EXPECT_EQ(std::string(load.status().message()), message);

  ASSERT_OK_AND_ASSIGN(auto reader, PromptCacheReader::Open(env_.get(), "/f"));
  Result<std::shared_ptr<Cache>> layer = reader->ReadLayer(0, /*verify=*/true);
  EXPECT_THAT(layer, HasCode(StatusCode::kCorruption, ""));
  EXPECT_EQ(std::string(layer.status().message()), message);
  EXPECT_OK(reader->ReadLayer(1, /*verify=*/true));

  // A conversion copying the tensor checks it as it is written.
  Status convert = ConvertPromptCacheFile(env_.get(), "/f", "/out", ConvertOptions{});
  EXPECT_EQ(convert.code(), StatusCode::kCorruption);
  EXPECT_EQ(std::string(convert.message()), message + " (copied to '0.1')");
}

TEST_F(CorruptFileTest, AnEditedHeaderIsNamed) {
  std::vector<std::byte> bytes = FileBytes(env_.get(), "/f");
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t at = text.find(R"(model":"m")");  // the user key "1.model"
  ASSERT_NE(at, std::string::npos);
  bytes[at + 8] = std::byte{'n'};  // same length: only the header digest notices
  ASSERT_OK(WriteStringAtomic(env_.get(), "/f", bytes));
  ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(env_.get(), "/f"));
  ASSERT_EQ(report.mismatches.size(), 2u);
  EXPECT_EQ(report.mismatches[0].tensor, "");
  EXPECT_THAT(report.mismatches[0].Message("/f"), ::testing::StartsWith("/f: the header: SHA-256 mismatch: expected "));
  EXPECT_NE(report.mismatches[0].expected, report.mismatches[0].found);
  EXPECT_EQ(report.mismatches[1].tensor, "0.1");
  LoadPromptCacheOptions verify;
  verify.verify = true;
  Result<LoadedPromptCache> load = LoadPromptCache(env_.get(), "/f", verify);
  EXPECT_EQ(std::string(load.status().message()),
            report.mismatches[0].Message("/f") + "\n" + report.mismatches[1].Message("/f"));
}

}  // namespace
}  // namespace kvstore
