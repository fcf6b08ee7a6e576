// SharedPromptCache against values planted by someone else: a fetch is a
// hit or a miss, never an error, and a refused value is deleted.
#include <functional>

#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "libkvstore/remote/mem_kv_backend.h"
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
 public:
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
  // Makes `key` hold another type than a byte string (as RPUSH would in Redis).
  void PlantOtherType(const std::string& key) { static_cast<MemKvBackend*>(backend_.get())->PutOtherType(key); }
};

// A key of another type where a chunk or a snapshot should be is a corrupt
// value: a counted miss (not a backend error), deleted, so that the next
// insert puts the chunk back.
TEST_F(SharedTierHostileTest, AKeyOfAnotherTypeIsACountedMissAndDeleted) {
  const PromptCacheCheckpoint at_one_chunk[] = {{kC, WindowModel(kC)}};
  ASSERT_OK(tier_->Insert(fp_, tokens_, cache_, at_one_chunk));
  const Tokens query = Iota(2 * kC + 1);
  const std::string keys[] = {ChunkKey("kvstore:", ns_, ChunkKind::kRows, chain_[1]),
                              ChunkKey("kvstore:", ns_, ChunkKind::kSnapshot, chain_[1])};
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(keys[i]);
    PlantOtherType(keys[i]);
    ASSERT_OK_AND_ASSIGN(auto hit, tier_->Fetch(fp_, query));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tokens, kC);
    EXPECT_EQ(tier_->stats().corrupt, static_cast<int64_t>(i + 1));
    EXPECT_EQ(tier_->stats().deleted, static_cast<int64_t>(i + 1));
    EXPECT_EQ(tier_->stats().backend_errors, 0);
    EXPECT_EQ(tier_->stats().last_refusal, "shared tier: " + keys[i] + ": holds another type than a byte string");
    EXPECT_FALSE(Has(keys[i]));
    ASSERT_OK(tier_->Insert(fp_, tokens_, cache_, at_one_chunk));
    ASSERT_OK_AND_ASSIGN(hit, tier_->Fetch(fp_, query));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tokens, 2 * kC);
  }
}

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
  using FaultyBackend::Get;
  Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys,
                                                      std::vector<bool>* other_type) override {
    Result<std::vector<std::optional<std::string>>> got = FaultyBackend::Get(keys, other_type);
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

// Plants a bad value at chunk 1's key with `plant`, and has a racing
// writer put the good value back between the fetch's GET and its delete.
void RaceAGoodValueAgainstTheDelete(SharedTierHostileTest& t,
                                    const std::function<void(const std::string& key, const std::string& good)>& plant) {
  RacingBackend racing(t.backend_.get());
  auto tier = OpenTier(&racing, kC);
  const PromptCacheCheckpoint at_one_chunk[] = {{kC, WindowModel(kC)}};
  ASSERT_OK(tier->Insert(t.fp_, t.tokens_, t.cache_, at_one_chunk));
  const std::string key = ChunkKey("kvstore:", t.ns_, ChunkKind::kRows, t.chain_[1]);
  ASSERT_OK_AND_ASSIGN(auto stored, t.backend_->Get(std::vector<std::string>{key}));
  ASSERT_TRUE(stored[0].has_value());
  const std::string good = *stored[0];
  plant(key, good);
  racing.ReplaceAfterGet(key, good);

  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(t.fp_, Iota(2 * kC + 1)));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, kC);
  EXPECT_EQ(tier->stats().corrupt, 1);
  EXPECT_EQ(tier->stats().deleted, 0);
  EXPECT_EQ(tier->stats().replaced_before_delete, 1);
  ASSERT_OK_AND_ASSIGN(auto now, t.backend_->Get(std::vector<std::string>{key}));
  EXPECT_EQ(now[0], good);
  // The next fetch serves it.
  ASSERT_OK_AND_ASSIGN(hit, tier->Fetch(t.fp_, Iota(2 * kC + 1)));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 2 * kC);
}

TEST_F(SharedTierHostileTest, AGoodValueWrittenAfterTheReadIsNotDeleted) {
  RaceAGoodValueAgainstTheDelete(*this, [&](const std::string& key, const std::string& good) {
    Plant(key, good.substr(0, good.size() / 2));
  });
}

// The same race for a key of another type: the delete removes only a key
// that still holds another type, never the good value put back since.
TEST_F(SharedTierHostileTest, AGoodValueWrittenAfterAnotherTypeWasReadIsNotDeleted) {
  RaceAGoodValueAgainstTheDelete(*this, [&](const std::string& key, const std::string&) { PlantOtherType(key); });
}

}  // namespace
}  // namespace kvstore
