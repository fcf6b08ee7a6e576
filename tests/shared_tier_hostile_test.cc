// SharedPromptCache against values planted by someone else: a fetch is a
// hit or a miss, never an error, and a refused value is deleted.
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "libkvstore/shared_tier/chunk_codec.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Iota;
using testing::OpenTier;
using testing::Prefill;
using testing::Tokens;

constexpr int64_t kC = 4;

// A KVCache and a 4-token RotatingKVCache, filled a token at a time: the
// window has dropped rows by 8 tokens, so each boundary needs a snapshot.
PromptCache WindowModel(int64_t tokens) {
  PromptCache cache = {std::make_shared<KVCache>(), std::make_shared<RotatingKVCache>(4)};
  Prefill(*cache[0], tokens, 1, 1);
  Prefill(*cache[1], tokens, 1, 2);
  return cache;
}

class SharedTierHostileTest : public ::testing::Test {
 protected:
  std::unique_ptr<KvBackend> backend_ = NewMemKvBackend();
  std::unique_ptr<SharedPromptCache> tier_ = OpenTier(backend_.get(), kC);
  const PromptCache cache_ = WindowModel(2 * kC);
  const ModelFingerprint fp_ = testing::FingerprintOf(cache_, "m");
  const Tokens tokens_ = Iota(2 * kC);
  const ChunkNamespace ns_ = MakeChunkNamespace(fp_, kC);
  const std::vector<Sha256Digest> chain_ = ChainHashes(ns_, tokens_, 2);

  // Replaces the value of `key` with `value`.
  void Plant(const std::string& key, const std::string& value) {
    ASSERT_OK(backend_->Delete(std::vector<std::string>{key}));
    ASSERT_OK(backend_->PutIfAbsent(std::vector<KvPut>{{key, value}}));
  }
  bool Has(const std::string& key) { return (*backend_->Exists(std::vector<std::string>{key}))[0]; }
};

// An unsealed snapshot value that lists no layers passes every other check;
// it must be refused (and deleted) so that the fetch falls back to the
// boundary before it, and ServerPromptCache keeps its own hits.
TEST_F(SharedTierHostileTest, ASnapshotLackingALeafIsRefusedAndAShorterPrefixServed) {
  const PromptCacheCheckpoint at_one_chunk[] = {{kC, WindowModel(kC)}};
  ASSERT_OK(tier_->Insert(fp_, tokens_, cache_, at_one_chunk));
  const std::string key = ChunkKey("kvstore:", ns_, ChunkKind::kSnapshot, chain_[1]);
  ChunkHeader h{.kind = ChunkKind::kSnapshot, .ns_digest = ns_.digest.ToHex(), .index = 1, .chunk_tokens = kC,
                .tokens = Tokens(tokens_.begin() + kC, tokens_.end()), .chain = chain_[1].ToHex(),
                .parent = chain_[0].ToHex(), .layers = {}, .writer = "evil"};
  ASSERT_OK_AND_ASSIGN(std::string empty, EncodeChunk(key, h, {}, {}));
  Plant(key, empty);

  const Tokens query = Iota(2 * kC + 1);
  ASSERT_OK_AND_ASSIGN(auto hit, tier_->Fetch(fp_, query));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, kC);
  EXPECT_EQ(tier_->stats().corrupt, 1);
  EXPECT_EQ(tier_->stats().deleted, 1);
  EXPECT_THAT(tier_->stats().last_refusal, ::testing::HasSubstr("lacks layer 1"));
  EXPECT_FALSE(Has(key));

  // Planted again, behind a memory hit of ServerPromptCache.
  Plant(key, empty);
  ServerPromptCache server(ServerPromptCacheOptions{.shared = tier_.get()});
  ASSERT_OK(server.Insert(fp_, Iota(kC), WindowModel(kC)));
  ASSERT_OK_AND_ASSIGN(auto served, server.Fetch(fp_, query));
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->reused, kC);
  EXPECT_EQ(tier_->stats().deleted, 2);
  EXPECT_EQ(tier_->stats().rebuild_failures, 0);
}

// Another reader refuses and deletes the value this one is refusing, and a
// writer puts a good value back (SET NX), all between this reader's GET and
// its delete: the good value must survive.
class RacingBackend : public testing::FaultyBackend {
 public:
  using FaultyBackend::FaultyBackend;
  void ReplaceAfterGet(std::string key, std::string value) {
    key_ = std::move(key);
    value_ = std::move(value);
  }
  Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys) override {
    Result<std::vector<std::optional<std::string>>> got = FaultyBackend::Get(keys);
    if (std::find(keys.begin(), keys.end(), key_) != keys.end()) {
      const std::string k[] = {key_};
      EXPECT_OK(FaultyBackend::Delete(k));
      EXPECT_OK(FaultyBackend::PutIfAbsent(std::vector<KvPut>{{key_, value_}}).status());
      key_.clear();
    }
    return got;
  }

 private:
  std::string key_, value_;
};

TEST_F(SharedTierHostileTest, AGoodValueWrittenAfterTheReadIsNotDeleted) {
  RacingBackend racing(backend_.get());
  auto tier = OpenTier(&racing, kC);
  const PromptCacheCheckpoint at_one_chunk[] = {{kC, WindowModel(kC)}};
  ASSERT_OK(tier->Insert(fp_, tokens_, cache_, at_one_chunk));
  const std::string key = ChunkKey("kvstore:", ns_, ChunkKind::kRows, chain_[1]);
  ASSERT_OK_AND_ASSIGN(auto stored, backend_->Get(std::vector<std::string>{key}));
  ASSERT_TRUE(stored[0].has_value());
  const std::string good = *stored[0];
  Plant(key, good.substr(0, good.size() / 2));
  racing.ReplaceAfterGet(key, good);

  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, Iota(2 * kC + 1)));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, kC);
  EXPECT_EQ(tier->stats().corrupt, 1);
  EXPECT_EQ(tier->stats().deleted, 0);
  EXPECT_EQ(tier->stats().replaced_before_delete, 1);
  ASSERT_OK_AND_ASSIGN(auto now, backend_->Get(std::vector<std::string>{key}));
  EXPECT_EQ(now[0], good);
  // The next fetch serves it.
  ASSERT_OK_AND_ASSIGN(hit, tier->Fetch(fp_, Iota(2 * kC + 1)));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 2 * kC);
}

}  // namespace
}  // namespace kvstore
