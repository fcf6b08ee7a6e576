// PromptCacheStore: what a fetch checks in a loaded entry beyond its
// digests, and entries replaced while they are being dropped.
#include "kvstore/prompt_cache_store.h"

#include "libkvstore/reuse/store_format.h"
#include "prompt_cache_store_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::CacheOf;
using ::kvstore::testing::Tokens;
using PromptCacheStoreTest = ::kvstore::testing::PromptCacheStoreTest;

// A well-formed, sealed file (another writer's) whose key names 4 tokens
// but whose layer holds 2: dropped as corrupt, never served as 4 tokens.
TEST_F(PromptCacheStoreTest, EntryHoldingFewerTokensThanItsKeyIsDropped) {
  const Tokens key = {1, 2, 3, 4};
  EXPECT_THAT(OpenStore()->Put("m", key, CacheOf(2, 7)),
              ::kvstore::testing::HasCode(StatusCode::kInvalidArgument, "layer 0 (KVCache): offset 2 != 4 tokens"));
  ASSERT_OK(env_->CreateDir(kvstore::testing::kDir));
  const std::string file = StoreFileName("m", key);
  SavePromptCacheOptions options;
  options.layout = PromptCacheLayout::kMlxLm;
  ASSERT_OK(SavePromptCache(env_.get(), Path(file), CacheOf(2, 7), StoreKeyMetadata("m", key), options));
  std::unique_ptr<PromptCacheStore> store = OpenStore();
  EXPECT_EQ(store->entries(), 1);
  EXPECT_EQ(Fetch(*store, {1, 2, 3, 4, 5}), -1);
  EXPECT_EQ(store->corrupt_dropped(), 1);
  EXPECT_EQ(store->entries(), 0);
  EXPECT_FALSE(env_->FileExists(Path(file)));
}

}  // namespace
}  // namespace kvstore
