// ServerPromptCache::Open: the cache opens and owns its tiers and its model
// registry; a restart on the same directory is served from its first fetch
// knowing only the model's id.
#include <string>

#include "kvstore/kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe;
using testing::HasCode;
using testing::Iota;
using testing::TempDir;

TEST(ServerPromptCacheOpenTest, OwnsItsDiskTierAndARestartIsWarm) {
  TempDir tmp;
  auto kv = std::make_shared<KVCache>();
  testing::Prefill(*kv, 40, 40, 7);
  const PromptCache stored = {kv};
  {
    ASSERT_OK_AND_ASSIGN(auto cache, ServerPromptCache::Open({.directory = tmp.Join("store")}));
    ASSERT_NE(cache->disk(), nullptr);
    EXPECT_EQ(cache->shared(), nullptr);
    // What a server knowing only its model's id learns at an insert.
    ASSERT_OK_AND_ASSIGN(ModelFingerprint fp, cache->models().Learn("model-x", stored));
    ASSERT_OK(cache->Insert(fp, Iota(40), stored));
  }  // the queued write is finished, the store closed
  ASSERT_OK_AND_ASSIGN(auto restarted, ServerPromptCache::Open({.directory = tmp.Join("store")}));
  std::optional<ModelFingerprint> fp = restarted->models().Find("model-x");
  ASSERT_TRUE(fp.has_value());
  testing::Tokens query = Iota(40);
  query.push_back(99);
  ASSERT_OK_AND_ASSIGN(auto hit, restarted->Fetch(*fp, query));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tier, PromptCacheTier::kDisk);
  EXPECT_EQ(hit->reused, 40);
  EXPECT_EQ(Describe(hit->cache), Describe(stored));
}

TEST(ServerPromptCacheOpenTest, ATierThatCannotOpenIsTheError) {
  TempDir tmp;
  ASSERT_OK(WriteStringAtomic(Env::Default(), tmp.Join("file"), std::as_bytes(std::span("x", 1))));
  EXPECT_FALSE(ServerPromptCache::Open({.directory = tmp.Join("file")}).ok());
  // No server listens on port 1; the password is never in the message.
  ServerPromptCacheOptions options;
  options.redis.url = "redis://user:hunter2-secret@127.0.0.1:1";
  Result<std::unique_ptr<ServerPromptCache>> refused = ServerPromptCache::Open(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString().find("hunter2-secret"), std::string::npos) << refused.status().ToString();
  // An empty secret is refused before any connection is tried.
  options.shared_options.secret = "";
  EXPECT_THAT(ServerPromptCache::Open(options), HasCode(StatusCode::kInvalidArgument, "empty secret"));
  // Without a tier it is a memory cache.
  ASSERT_OK_AND_ASSIGN(auto memory, ServerPromptCache::Open({}));
  EXPECT_EQ(memory->disk(), nullptr);
}

}  // namespace
}  // namespace kvstore
