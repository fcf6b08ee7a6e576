// RewritePromptCacheFile, the one convert/trim operation of kvtool and
// Python: every unset option is as the input, contradictions are refused
// before anything is read.
#include "kvstore/prompt_cache_rewrite.h"
#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;
using ::kvstore::testing::TempDir;

std::string Fixture(const std::string& name) { return testing::FixturePath("mlx-lm/" + name); }

PromptCacheInfo Info(const std::string& path) {
  Result<PromptCacheInfo> info = ReadPromptCacheInfo(Env::Default(), path);
  EXPECT_OK(info.status());
  return info.ok() ? *info : PromptCacheInfo{};
}

TEST(RewriteTest, NothingAskedCopiesTheBytes) {
  TempDir dir;
  const std::string in = Fixture("kvcache_f16_4l.safetensors"), out = dir.Join("o.safetensors");
  ASSERT_OK_AND_ASSIGN(RewriteResult r, RewritePromptCacheFile(Env::Default(), in, out, {}));
  EXPECT_TRUE(r.transcoded);
  EXPECT_EQ(r.layout, PromptCacheLayout::kMlxLm);
  EXPECT_EQ(testing::ReadFileBytes(in), testing::ReadFileBytes(out));
}

TEST(RewriteTest, UnsetFieldsAreAsTheInput) {
  TempDir dir;
  const std::string in = dir.Join("in.safetensors"), out = dir.Join("out.safetensors");
  RewriteOptions to032;
  to032.layout = PromptCacheLayout::kMlxLm032;
  to032.compress = true;
  to032.digest = DigestAlgorithm::kXxh3_128;
  ASSERT_OK(RewritePromptCacheFile(Env::Default(), Fixture("kvcache_f16_4l.safetensors"), in, to032).status());
  // A trim alone keeps layout, container and digest algorithm.
  RewriteOptions trim;
  trim.keep = 0;
  ASSERT_OK(RewritePromptCacheFile(Env::Default(), in, out, trim).status());
  const PromptCacheInfo info = Info(out);
  EXPECT_EQ(info.layout, PromptCacheLayout::kMlxLm032);
  EXPECT_TRUE(info.compression.has_value());
  EXPECT_EQ(info.digest_algorithm, DigestAlgorithm::kXxh3_128);
}

TEST(RewriteTest, TrimKeepsTheLayoutUnlessAsked) {
  TempDir dir;
  const std::string out = dir.Join("out.safetensors");
  RewriteOptions o;
  o.trim = 5;
  ASSERT_OK_AND_ASSIGN(RewriteResult r, RewritePromptCacheFile(Env::Default(), Fixture("kvcache_f16_4l.safetensors"), out, o));
  EXPECT_EQ(r.trimmed, 5);
  EXPECT_EQ(Info(out).layout, PromptCacheLayout::kMlxLm);
  EXPECT_EQ(Info(out).tokens(), 32);
  o.layout = PromptCacheLayout::kMlxLm032;
  ASSERT_OK(RewritePromptCacheFile(Env::Default(), Fixture("kvcache_f16_4l.safetensors"), out, o).status());
  EXPECT_EQ(Info(out).layout, PromptCacheLayout::kMlxLm032);
  EXPECT_EQ(Info(out).tokens(), 32);
}

TEST(RewriteTest, ConversionsAndContainer) {
  TempDir dir;
  const std::string out = dir.Join("out.safetensors");
  RewriteOptions o;
  o.quantize_bits = 8;
  o.level = 1;
  ASSERT_OK_AND_ASSIGN(RewriteResult r, RewritePromptCacheFile(Env::Default(), Fixture("kvcache_f16_4l.safetensors"), out, o));
  EXPECT_FALSE(r.transcoded);
  EXPECT_EQ(r.codec, ZstdCodec::kZstd);
  const PromptCacheInfo info = Info(out);
  EXPECT_TRUE(info.compression.has_value());
  EXPECT_EQ(info.layers[0].class_name, "QuantizedKVCache");
  EXPECT_TRUE(info.has_digests);  // a re-written file gets digests unless told not to
}

TEST(RewriteTest, ContradictionsAreRefusedFirst) {
  TempDir dir;
  const std::string missing = dir.Join("missing.safetensors"), out = dir.Join("o.safetensors");
  auto refused = [&](RewriteOptions o, const char* why) {
    EXPECT_THAT(RewritePromptCacheFile(Env::Default(), missing, out, o), HasCode(StatusCode::kInvalidArgument, why));
  };
  RewriteOptions o;
  o.compress = false;
  o.codec = ZstdCodec::kBytePlane;
  refused(o, "applies to compressed output");
  o = {};
  o.trim = 1;
  o.keep = 1;
  refused(o, "at most one of trim and keep");
  o = {};
  o.trim = -1;
  refused(o, ">= 0");
  o = {};
  o.dequantize = true;
  o.quantize_bits = 4;
  refused(o, "exclude each other");
  o = {};
  o.quantize_bits = 7;
  refused(o, "bits 2, 3, 4, 5, 6, 8");
  o = {};
  o.dtype = DType::kI32;
  refused(o, "dtype must be");
  o = {};
  o.layout = PromptCacheLayout::kMlxLmLegacy;
  refused(o, "read-only");
  o = {};
  o.integrity = false;
  o.digest = DigestAlgorithm::kSha256;
  refused(o, "needs integrity");
  EXPECT_THAT(RewritePromptCacheFile(Env::Default(), missing, out, {}), HasCode(StatusCode::kNotFound, ""));
}

}  // namespace
}  // namespace kvstore
