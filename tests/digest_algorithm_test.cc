// Per-file digest algorithms (docs/format.md §5.3-5.4): SHA-256 files are
// written as before, XXH3-128 files name their algorithm; a reader verifies
// whichever the file declares, refuses an unknown name and a digest of the
// wrong length; conversions and seals handle both; compressed files are
// checked on load; saves without fsync.
#include "kvstore/digest.h"
#include "kvstore/prompt_cache_file.h"
#include "libkvstore/format/seal.h"
#include "libkvstore/integrity/digest.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::FileBytes;
using ::kvstore::testing::HasCode;

SavePromptCacheOptions Xxh3() {
  SavePromptCacheOptions o;
  o.digest = DigestAlgorithm::kXxh3_128;
  return o;
}

std::optional<std::string> Meta(Env* env, const std::string& path, std::string_view key) {
  auto f = SafetensorsFile::Open(env, path);
  EXPECT_TRUE(f.ok());
  auto v = (*f)->header().FindMetadata(key);
  return v ? std::optional<std::string>(*v) : std::nullopt;
}

// Rewrites `path` with the same tensors and `edit` applied to its metadata.
void EditMetadata(Env* env, const std::string& path, const std::function<void(Metadata&)>& edit) {
  ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(env, path));
  std::vector<NamedArray> tensors;
  for (const TensorInfo& t : f->header().tensors) {
    ASSERT_OK_AND_ASSIGN(Array a, f->Tensor(t));
    tensors.push_back({t.name, a.Clone()});
  }
  Metadata md = f->header().metadata;
  edit(md);
  ASSERT_OK(testing::WriteRaw(env, path, tensors, md));
}

// Flips `mask` in byte `at` of tensor `tensor`'s data in the file at `path`.
void FlipTensorByte(Env* env, const std::string& path, const std::string& tensor, size_t at, uint8_t mask) {
  ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(env, path));
  const TensorInfo* t = f->header().FindTensor(tensor);
  ASSERT_NE(t, nullptr);
  const size_t offset = f->header().data_offset() + t->begin + at;
  f.reset();
  std::vector<std::byte> bytes = FileBytes(env, path);
  bytes[offset] ^= std::byte{mask};
  ASSERT_OK(WriteStringAtomic(env, path, bytes));
}

TEST(DigestAlgorithmTest, NamesAndCanonicalHex) {
  EXPECT_EQ(DigestAlgorithmFromName("xxh3"), DigestAlgorithm::kXxh3_128);
  EXPECT_EQ(DigestAlgorithmFromName("xxh3-128"), DigestAlgorithm::kXxh3_128);
  EXPECT_EQ(DigestAlgorithmFromName("sha256"), DigestAlgorithm::kSha256);
  EXPECT_EQ(DigestAlgorithmFromName("md5"), std::nullopt);
  // What `xxhsum -H2` prints for "abc" and for nothing.
  EXPECT_EQ(ComputeDigest(DigestAlgorithm::kXxh3_128, std::string_view("abc")).ToHex(),
            "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(ComputeDigest(DigestAlgorithm::kXxh3_128, std::string_view("")).ToHex(),
            "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(Digest::FromHex(DigestAlgorithm::kXxh3_128, "06b05ab6733a618578af5f94892f3950")->ToHex(),
            "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(Digest::FromHex(DigestAlgorithm::kXxh3_128, std::string(64, 'a')), std::nullopt);
}

class DigestFileTest : public ::testing::Test {
 protected:
  std::unique_ptr<Env> env_ = NewMemEnv();
};

TEST_F(DigestFileTest, Sha256FilesAreWrittenAsBefore) {
  ASSERT_OK(SavePromptCache(env_.get(), "/s", testing::SmallCache(), {}));
  EXPECT_EQ(Meta(env_.get(), "/s", "1.kvstore_digest_algorithm"), std::nullopt);
  EXPECT_EQ(Meta(env_.get(), "/s", "1.kvstore_sha256_tensors")->size() > 0, true);
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env_.get(), "/s"));
  EXPECT_EQ(info.digest_algorithm, DigestAlgorithm::kSha256);
}

TEST_F(DigestFileTest, Xxh3FileNamesItsAlgorithmAndVerifies) {
  ASSERT_OK(SavePromptCache(env_.get(), "/x", testing::SmallCache(), {{"model", "m"}}, Xxh3()));
  EXPECT_EQ(Meta(env_.get(), "/x", "1.kvstore_digest_algorithm"), "xxh3-128");
  EXPECT_EQ(Meta(env_.get(), "/x", "1.kvstore_sha256_tensors"), std::nullopt);
  EXPECT_EQ(Meta(env_.get(), "/x", "1.kvstore_digest_header")->size(), 32u);
  ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(env_.get(), "/x"));
  EXPECT_TRUE(report.ok());
  LoadPromptCacheOptions verify;
  verify.verify = true;
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(env_.get(), "/x", verify));
  EXPECT_TRUE(loaded.verified);
  EXPECT_EQ(loaded.digest_algorithm, DigestAlgorithm::kXxh3_128);
  EXPECT_EQ(loaded.user_metadata, (Metadata{{"model", "m"}}));  // the digest keys are ours

  // A tensor's digest is the XXH3-128 of its bytes, as xxhsum -H2 prints it.
  ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(env_.get(), "/x"));
  const TensorInfo* t = f->header().FindTensor("0.0");
  ASSERT_NE(t, nullptr);
  const std::string want = ComputeDigest(DigestAlgorithm::kXxh3_128, f->TensorBytes(*t)).ToHex();
  EXPECT_NE(Meta(env_.get(), "/x", "1.kvstore_digest_tensors")->find("\"0.0\":\"" + want + "\""), std::string::npos);
}

TEST_F(DigestFileTest, Xxh3MismatchNamesTheAlgorithm) {
  ASSERT_OK(SavePromptCache(env_.get(), "/x", testing::SmallCache(), {}, Xxh3()));
  FlipTensorByte(env_.get(), "/x", "0.1", 0, 1);
  ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(env_.get(), "/x"));
  ASSERT_EQ(report.mismatches.size(), 1u);
  EXPECT_THAT(report.ToStatus("/x"), HasCode(StatusCode::kCorruption, "/x: tensor '0.1': XXH3-128 mismatch"));
}

TEST_F(DigestFileTest, UnknownAlgorithmIsCorruption) {
  ASSERT_OK(SavePromptCache(env_.get(), "/x", testing::SmallCache(), {}, Xxh3()));
  EditMetadata(env_.get(), "/x", [](Metadata& md) {
    for (auto& [k, v] : md) {
      if (k == "1.kvstore_digest_algorithm") v = "blake9";
    }
  });
  EXPECT_THAT(ReadPromptCacheInfo(env_.get(), "/x").status(),
              HasCode(StatusCode::kCorruption, "unknown digest algorithm \"blake9\""));
  EXPECT_THAT(LoadPromptCache(env_.get(), "/x").status(), HasCode(StatusCode::kCorruption, "blake9"));
}

TEST_F(DigestFileTest, Xxh3WithSha256LengthDigestsIsRefused) {
  // The digests of a SHA-256 file relabelled as XXH3: every entry is 64 hex
  // digits where 32 are declared.
  ASSERT_OK(SavePromptCache(env_.get(), "/x", testing::SmallCache(), {}));
  EditMetadata(env_.get(), "/x", [](Metadata& md) {
    for (auto& [k, v] : md) {
      if (k == "1.kvstore_sha256_tensors") k = "1.kvstore_digest_tensors";
      if (k == "1.kvstore_sha256_header") k = "1.kvstore_digest_header";
    }
    md.emplace_back("1.kvstore_digest_algorithm", "xxh3-128");
  });
  ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(env_.get(), "/x"));
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.ToStatus("/x").code(), StatusCode::kCorruption);
  LoadPromptCacheOptions verify;
  verify.verify = true;
  EXPECT_EQ(LoadPromptCache(env_.get(), "/x", verify).status().code(), StatusCode::kCorruption);
}

TEST_F(DigestFileTest, ConvertKeepsOrChangesTheAlgorithm) {
  ASSERT_OK(SavePromptCache(env_.get(), "/s", testing::SmallCache(), {}));
  ConvertOptions to_xxh3;
  to_xxh3.output.digest = DigestAlgorithm::kXxh3_128;
  ASSERT_OK(ConvertPromptCacheFile(env_.get(), "/s", "/x", to_xxh3));  // checks the SHA-256 input
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo x, ReadPromptCacheInfo(env_.get(), "/x"));
  EXPECT_EQ(x.digest_algorithm, DigestAlgorithm::kXxh3_128);
  ASSERT_OK_AND_ASSIGN(VerifyReport rx, VerifyPromptCacheFile(env_.get(), "/x"));
  EXPECT_TRUE(rx.ok());
  ConvertOptions same;
  same.output = SameFormatAs(x);
  same.output.compression_level = 3;
  ASSERT_OK(ConvertPromptCacheFile(env_.get(), "/x", "/xz", same));
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo xz, ReadPromptCacheInfo(env_.get(), "/xz"));
  EXPECT_EQ(xz.digest_algorithm, DigestAlgorithm::kXxh3_128);
  ConvertOptions back;
  ASSERT_OK(ConvertPromptCacheFile(env_.get(), "/xz", "/s2", back));
  ASSERT_OK_AND_ASSIGN(VerifyReport rs, VerifyPromptCacheFile(env_.get(), "/s2"));
  EXPECT_TRUE(rs.ok());
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo s2, ReadPromptCacheInfo(env_.get(), "/s2"));
  EXPECT_EQ(s2.digest_algorithm, DigestAlgorithm::kSha256);
}

TEST_F(DigestFileTest, ConvertChecksAnXxh3InputIntoSha256) {
  ASSERT_OK(SavePromptCache(env_.get(), "/x", testing::SmallCache(), {}, Xxh3()));
  FlipTensorByte(env_.get(), "/x", "0.0", 1, 4);
  EXPECT_THAT(ConvertPromptCacheFile(env_.get(), "/x", "/s", ConvertOptions{}),
              HasCode(StatusCode::kCorruption, "XXH3-128 mismatch"));
}

TEST_F(DigestFileTest, CompressedFilesAreCheckedOnLoadByDefault) {
  for (DigestAlgorithm algorithm : {DigestAlgorithm::kSha256, DigestAlgorithm::kXxh3_128}) {
    SavePromptCacheOptions plain;
    plain.digest = algorithm;
    ASSERT_OK(SavePromptCache(env_.get(), "/p", testing::SmallCache(), {}, plain));
    FlipTensorByte(env_.get(), "/p", "1.1", 0, 0x10);
    // Transcoding keeps the (now wrong) digests as they are.
    TranscodeOptions z;
    z.compression_level = 3;
    ASSERT_OK(TranscodePromptCacheFile(env_.get(), "/p", "/z", z));
    EXPECT_THAT(LoadPromptCache(env_.get(), "/z").status(), HasCode(StatusCode::kCorruption, "tensor '1.1'"));
    LoadPromptCacheOptions unchecked;
    unchecked.verify_compressed = false;
    EXPECT_OK(LoadPromptCache(env_.get(), "/z", unchecked).status());
  }
}

TEST_F(DigestFileTest, SealCoversXxh3Digests) {
  ASSERT_OK(SavePromptCache(env_.get(), "/x", testing::SmallCache(), {}, Xxh3()));
  ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(env_.get(), "/x"));
  Metadata md = f->header().metadata;
  SafetensorsHeader h = f->header();
  const std::string seal = SealDigests("secret", "ctx", *h.FindMetadata("1.kvstore_digest_header"),
                                       *h.FindMetadata("1.kvstore_digest_tensors"));
  h.metadata.emplace_back("1.kvstore_hmac_sha256", seal);
  EXPECT_OK(CheckSeal(h, "secret", "ctx"));
  EXPECT_EQ(CheckSeal(h, "other", "ctx").code(), StatusCode::kCorruption);
  for (auto& [k, v] : h.metadata) {
    if (k == "1.kvstore_digest_header") v[0] = v[0] == '0' ? '1' : '0';
  }
  EXPECT_EQ(CheckSeal(h, "secret", "ctx").code(), StatusCode::kCorruption);
}

TEST_F(DigestFileTest, NonDurableSaveWritesTheSameBytes) {
  ASSERT_OK(SavePromptCache(env_.get(), "/d", testing::SmallCache(), {}));
  SavePromptCacheOptions fast;
  fast.durability = Durability::kNone;
  ASSERT_OK(SavePromptCache(env_.get(), "/n", testing::SmallCache(), {}, fast));
  EXPECT_EQ(FileBytes(env_.get(), "/d"), FileBytes(env_.get(), "/n"));
}

}  // namespace
}  // namespace kvstore
