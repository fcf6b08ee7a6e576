// PromptCacheReader::SameHeader and VerifyCopy: another reader's copy of a
// file (what MLX's loader returns for kvstore.mlx_lm) is served only when its
// header is the one checked and, verified, its bytes match the digests.
#include <cstring>

#include "kvstore/prompt_cache_file.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;
using TensorCopy = PromptCacheReader::TensorCopy;

class ReaderCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SavePromptCacheOptions xxh3;
    xxh3.digest = DigestAlgorithm::kXxh3_128;
    ASSERT_OK(SavePromptCache(env_.get(), "/x", testing::SmallCache(), {{"model", "m"}}, xxh3));
    ASSERT_OK_AND_ASSIGN(reader_, PromptCacheReader::Open(env_.get(), "/x"));
    ASSERT_OK_AND_ASSIGN(file_, SafetensorsFile::Open(env_.get(), "/x"));
    for (const TensorInfo& t : file_->header().tensors) {
      std::span<const std::byte> b = file_->TensorBytes(t);
      bytes_.emplace_back(b.begin(), b.end());
    }
    for (size_t i = 0; i < bytes_.size(); ++i) {
      const TensorInfo& t = file_->header().tensors[i];
      copies_.push_back(TensorCopy{.name = t.name, .dtype = t.dtype, .shape = t.shape, .bytes = bytes_[i]});
    }
    std::reverse(copies_.begin(), copies_.end());  // any order
  }

  std::unique_ptr<Env> env_ = NewMemEnv();
  std::unique_ptr<PromptCacheReader> reader_;
  std::shared_ptr<const SafetensorsFile> file_;
  std::vector<std::vector<std::byte>> bytes_;
  std::vector<TensorCopy> copies_;
};

TEST_F(ReaderCopyTest, AnExactCopyPasses) {
  Metadata md = file_->header().metadata;
  std::reverse(md.begin(), md.end());
  EXPECT_TRUE(reader_->SameHeader(md, copies_));
  EXPECT_OK(reader_->VerifyCopy(copies_));
}

TEST_F(ReaderCopyTest, AnotherHeaderIsNotTheSame) {
  const Metadata md = file_->header().metadata;
  Metadata other = md;
  other[0].second += "x";
  EXPECT_FALSE(reader_->SameHeader(other, copies_));
  EXPECT_FALSE(reader_->SameHeader(Metadata(md.begin() + 1, md.end()), copies_));
  std::vector<TensorCopy> c = copies_;
  c[0].shape[0] += 1;
  EXPECT_FALSE(reader_->SameHeader(md, c));
  c = copies_;
  c[0].dtype = c[0].dtype == DType::kF32 ? DType::kF16 : DType::kF32;
  EXPECT_FALSE(reader_->SameHeader(md, c));
  c = copies_;
  c[1].name = c[0].name;  // a name twice, one missing
  EXPECT_FALSE(reader_->SameHeader(md, c));
  c = copies_;
  c.pop_back();
  EXPECT_FALSE(reader_->SameHeader(md, c));
}

TEST_F(ReaderCopyTest, ChangedBytesFailVerification) {
  bytes_.back()[0] ^= std::byte{1};  // copies_ is reversed: copies_[0] views it
  EXPECT_THAT(reader_->VerifyCopy(copies_),
              HasCode(StatusCode::kCorruption, "/x: tensor '" + std::string(copies_[0].name) + "': XXH3-128 mismatch"));
  std::vector<TensorCopy> c = copies_;
  c[0].bytes = c[0].bytes.first(c[0].bytes.size() - 1);  // cut short
  EXPECT_THAT(reader_->VerifyCopy(c), HasCode(StatusCode::kCorruption, "mismatch"));
  c = copies_;
  c.pop_back();  // a digest without its tensor
  bytes_.back()[0] ^= std::byte{1};
  EXPECT_THAT(reader_->VerifyCopy(c), HasCode(StatusCode::kCorruption, "(no such tensor)"));
}

TEST_F(ReaderCopyTest, WithoutDigestsThereIsNothingToVerify) {
  SavePromptCacheOptions none;
  none.integrity = false;
  ASSERT_OK(SavePromptCache(env_.get(), "/n", testing::SmallCache(), {}, none));
  ASSERT_OK_AND_ASSIGN(auto reader, PromptCacheReader::Open(env_.get(), "/n"));
  EXPECT_THAT(reader->VerifyCopy(copies_), HasCode(StatusCode::kFailedPrecondition, "no digests"));
}

}  // namespace
}  // namespace kvstore
