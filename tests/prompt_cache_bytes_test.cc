// Prompt-cache files in memory and the HMAC seal of their digests.
#include "kvstore/prompt_cache_bytes.h"

#include "libkvstore/format/bytes_io.h"
#include "libkvstore/format/digests.h"
#include "libkvstore/format/seal.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;

std::string FileString(Env* env, const std::string& path) {
  std::vector<std::byte> bytes = testing::FileBytes(env, path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST(PromptCacheBytesTest, TheSameBytesAsAFile) {
  std::unique_ptr<Env> env = NewMemEnv();
  const PromptCache cache = testing::SmallCache();
  for (std::optional<int> level : {std::optional<int>(), std::optional<int>(3)}) {
    SavePromptCacheOptions options;
    options.compression_level = level;
    ASSERT_OK(SavePromptCache(env.get(), "/c.safetensors", cache, {{"k", "v"}}, options));
    ASSERT_OK_AND_ASSIGN(std::string bytes, SavePromptCacheToString(cache, {{"k", "v"}}, options));
    EXPECT_EQ(bytes, FileString(env.get(), "/c.safetensors"));
    LoadPromptCacheOptions load;
    load.verify = true;
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded,
                         LoadPromptCacheFromString(std::make_shared<const std::string>(bytes), load));
    EXPECT_TRUE(loaded.verified);
    EXPECT_EQ(loaded.compressed, level.has_value());
    ASSERT_EQ(loaded.cache.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(testing::Fingerprint(*loaded.cache[i]), testing::Fingerprint(*cache[i]));
  }
  EXPECT_THAT(LoadPromptCacheFromString(std::make_shared<const std::string>("nonsense")),
              HasCode(StatusCode::kResourceExhausted, "(in memory): safetensors H2: header length"));
  EXPECT_THAT(SavePromptCacheToString(cache, {{"a.b", "v"}}), HasCode(StatusCode::kInvalidArgument, "dot-free"));
}

class SealTest : public ::testing::Test {
 protected:
  std::string Sealed(std::string_view secret, std::string_view context) {
    WriterHooks hooks;
    hooks.seal = [&](std::string_view header_hex, std::string_view tensors_json) {
      return SealDigests(secret, context, header_hex, tensors_json);
    };
    Result<std::string> bytes = SaveLayersToString(
        cache_.size(), [&](size_t i) -> Result<std::shared_ptr<const Cache>> { return cache_[i]; }, {{"k", "v"}},
        SavePromptCacheOptions{}, hooks);
    EXPECT_OK(bytes);
    return *bytes;
  }
  static SafetensorsHeader HeaderOf(const std::string& bytes) {
    Result<std::unique_ptr<PromptCacheReader>> reader = OpenPromptCacheReader(std::make_shared<const std::string>(bytes));
    EXPECT_OK(reader);
    return (*reader)->info().header;
  }
  const PromptCache cache_ = testing::SmallCache();
};

TEST_F(SealTest, TheSealCoversDigestsAndContextAndIsNotUserMetadata) {
  const std::string bytes = Sealed("secret", "key-1");
  const SafetensorsHeader header = HeaderOf(bytes);
  EXPECT_OK(CheckSeal(header, "secret", "key-1"));
  EXPECT_THAT(CheckSeal(header, "Secret", "key-1"), HasCode(StatusCode::kCorruption, "does not match"));
  EXPECT_THAT(CheckSeal(header, "secret", "key-2"), HasCode(StatusCode::kCorruption, "does not match"));
  // Verified loads and stock readers see an ordinary file.
  LoadPromptCacheOptions load;
  load.verify = true;
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCacheFromString(std::make_shared<const std::string>(bytes), load));
  EXPECT_EQ(loaded.user_metadata, (Metadata{{"k", "v"}}));
  // Unsealed files say so; the key is reserved.
  ASSERT_OK_AND_ASSIGN(std::string plain, SavePromptCacheToString(cache_, {}));
  EXPECT_THAT(CheckSeal(HeaderOf(plain), "secret", "key-1"), HasCode(StatusCode::kCorruption, "no HMAC seal"));
  EXPECT_THAT(SavePromptCacheToString(cache_, {{"kvstore_hmac_sha256", "0"}}),
              HasCode(StatusCode::kInvalidArgument, "reserved"));
}

// Someone without the secret edits the header and recomputes its digest:
// the digests verify, the seal does not.
TEST_F(SealTest, AnEditWithRecomputedDigestsBreaksTheSeal) {
  const std::string bytes = Sealed("secret", "key-1");
  SafetensorsHeader header = HeaderOf(bytes);
  for (auto& [k, v] : header.metadata) {
    if (k == "1.k") v = "w";
  }
  const std::string canonical = CanonicalHeader(header.tensors, header.metadata);
  for (auto& [k, v] : header.metadata) {
    if (k == kHeaderDigestMetaKey) v = Sha256(std::string_view(canonical)).ToHex();
  }
  EXPECT_THAT(CheckSeal(header, "secret", "key-1"), HasCode(StatusCode::kCorruption, "does not match"));
  // Every byte of the seal matters.
  const size_t at = bytes.find("\"1.kvstore_hmac_sha256\":\"") + 25;
  for (size_t i = 0; i < 64; i += 7) {
    std::string flipped = bytes;
    flipped[at + i] = flipped[at + i] == '0' ? '1' : '0';
    EXPECT_THAT(CheckSeal(HeaderOf(flipped), "secret", "key-1"), HasCode(StatusCode::kCorruption, "does not match"));
  }
}

}  // namespace
}  // namespace kvstore
