// The sealed shared tier (docs/format.md §8.6): with a secret every value
// is an AES-256-GCM envelope bound to its key and namespace, and keys are
// keyed by the secret. Any change, another key, namespace or secret, or a
// cut is refused and counted as forged; a fresh server finds the model's
// structure in the tier and is served from its first request.
#include "kvstore/kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "libkvstore/shared_tier/sealed_value.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe, testing::Iota, testing::OpenTier, testing::Prefill, testing::Tokens, testing::TrimmedTo;

constexpr int64_t kC = 4;

PromptCache OneLayer(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  Prefill(*kv, tokens, 3, seed, 2, 8);
  return {kv};
}

class SealedTierTest : public ::testing::Test {
 protected:
  std::string KeyOf(const Tokens& tokens, int64_t i, std::string_view secret = "s") const {
    const ChunkNamespace ns = MakeChunkNamespace(fp_, kC, {secret, "kvstore:"});
    return ChunkKey("kvstore:", ns, ChunkKind::kRows, ChainHashes(ns, tokens, static_cast<size_t>(i + 1))[i]);
  }
  std::string Value(const std::string& key) { return testing::ValueOf(*backend_, key); }
  void Replace(const std::string& key, const std::string& value) { testing::ReplaceValue(*backend_, key, value); }
  // Fetches tokens_ with `value` planted as chunk 1: served only chunk 0, one forged.
  void ExpectRefused(SharedPromptCache& tier, const std::string& value) {
    Replace(KeyOf(tokens_, 1), value);
    const SharedPromptCache::Stats before = tier.stats();
    ASSERT_OK_AND_ASSIGN(auto hit, tier.Fetch(fp_, tokens_));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tokens, kC);
    EXPECT_EQ(tier.stats().forged, before.forged + 1);
    Replace(KeyOf(tokens_, 1), good_);
  }

  const Tokens tokens_ = Iota(3 * kC);
  const PromptCache cache_ = OneLayer(3 * kC, 1);
  const ModelFingerprint fp_ = testing::FingerprintOf(cache_);
  std::unique_ptr<KvBackend> backend_ = NewMemKvBackend();
  std::string good_;
};

TEST_F(SealedTierTest, AnyChangedByteOrCutIsRefusedAsForged) {
  auto tier = OpenTier(backend_.get(), kC, "s");
  ASSERT_OK(tier->Insert(fp_, tokens_, cache_));
  good_ = Value(KeyOf(tokens_, 1));
  ASSERT_TRUE(LooksSealed(good_));
  for (size_t at = 0; at < good_.size(); ++at) {
    std::string bad = good_;
    bad[at] ^= 0x20;
    ExpectRefused(*tier, bad);
  }
  for (size_t keep : {size_t{0}, size_t{5}, size_t{20}, kSealedOverhead - 1, good_.size() / 2, good_.size() - 1}) {
    ExpectRefused(*tier, good_.substr(0, keep));
  }
  ExpectRefused(*tier, good_ + "x");
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, tokens_));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(cache_, 3 * kC)));
}

// A valid envelope under another key of its namespace, of another
// namespace (same model, other chunk size; same secret, other prefix), or
// sealed with another secret.
TEST_F(SealedTierTest, AnEnvelopeFromElsewhereIsRefusedAsForged) {
  auto tier = OpenTier(backend_.get(), kC, "s");
  ASSERT_OK(tier->Insert(fp_, tokens_, cache_));
  good_ = Value(KeyOf(tokens_, 1));
  ExpectRefused(*tier, Value(KeyOf(tokens_, 0)));
  ExpectRefused(*tier, Value(KeyOf(tokens_, 2)));
  // Another secret; another key prefix (so another namespace key).
  std::unique_ptr<KvBackend> other = NewMemKvBackend();
  ASSERT_OK_AND_ASSIGN(auto guess, SharedPromptCache::Open({.backend = other.get(), .chunk_tokens = kC,
                                                            .secret = "a guess", .async_insert = false}));
  ASSERT_OK(guess->Insert(fp_, tokens_, cache_));
  ExpectRefused(*tier, *(*other->Get(std::vector<std::string>{KeyOf(tokens_, 1, "a guess")}))[0]);
  ASSERT_OK_AND_ASSIGN(auto prefixed, SharedPromptCache::Open({.backend = other.get(), .key_prefix = "elsewhere:",
                                                               .chunk_tokens = kC, .secret = "s",
                                                               .async_insert = false}));
  ASSERT_OK(prefixed->Insert(fp_, tokens_, cache_));
  const ChunkNamespace ns = MakeChunkNamespace(fp_, kC, {"s", "elsewhere:"});
  ExpectRefused(*tier, *(*other->Get(std::vector<std::string>{
                           ChunkKey("elsewhere:", ns, ChunkKind::kRows, ChainHashes(ns, tokens_, 2)[1])}))[0]);
  // Unsealed: a well-formed chunk with valid digests.
  ASSERT_OK_AND_ASSIGN(auto plain, SharedPromptCache::Open({.backend = other.get(), .key_prefix = "plain:",
                                                            .chunk_tokens = kC, .async_insert = false}));
  ASSERT_OK(plain->Insert(fp_, tokens_, cache_));
  const ChunkNamespace plain_ns = MakeChunkNamespace(fp_, kC);
  ExpectRefused(*tier, *(*other->Get(std::vector<std::string>{ChunkKey(
                           "plain:", plain_ns, ChunkKind::kRows, ChainHashes(plain_ns, tokens_, 2)[1])}))[0]);
  EXPECT_EQ(tier->stats().forged, 5);
  EXPECT_EQ(tier->stats().deleted, 5);
}

// Keys are keyed by the secret: who knows the prompt and the model but not
// the secret cannot tell which keys hold it.
TEST_F(SealedTierTest, KeysDependOnTheSecret) {
  EXPECT_NE(KeyOf(tokens_, 0, "s"), KeyOf(tokens_, 0, "t"));
  EXPECT_NE(KeyOf(tokens_, 0, "s"), KeyOf(tokens_, 0, ""));
  EXPECT_NE(MakeChunkNamespace(fp_, kC, {"s", "kvstore:"}).id, MakeChunkNamespace(fp_, kC).id);
  EXPECT_TRUE(KeyOf(tokens_, 0, "s").starts_with("kvstore:v2/"));
  auto tier = OpenTier(backend_.get(), kC, "s");
  ASSERT_OK(tier->Insert(fp_, tokens_, cache_));
  ASSERT_OK_AND_ASSIGN(auto keys, backend_->Scan("kvstore:", 100));
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(LooksSealed(Value(key)));  // chunks, the descriptor and the model record
  }
  EXPECT_EQ(keys.size(), 3u + 2u);
}

// Values under the previous version's keys (v1/, HMAC-sealed kvstore-chunk/1)
// are never read: a clean miss, nothing refused.
TEST_F(SealedTierTest, OldVersionKeysAreACleanMiss) {
  auto writer = OpenTier(backend_.get(), kC, "s");
  ASSERT_OK(writer->Insert(fp_, tokens_, cache_));
  ASSERT_OK_AND_ASSIGN(auto keys, backend_->Scan("kvstore:v2/", 100));
  std::vector<std::pair<std::string, std::string>> old;  // KvPut views these
  for (const std::string& key : keys) old.emplace_back("kvstore:v1/" + key.substr(11), Value(key));
  std::vector<KvPut> puts;
  for (const auto& [key, value] : old) puts.push_back({key, value});
  ASSERT_OK(backend_->Delete(keys));
  ASSERT_OK(backend_->PutIfAbsent(puts));
  auto reader = OpenTier(backend_.get(), kC, "s");
  ASSERT_OK_AND_ASSIGN(auto hit, reader->Fetch(fp_, tokens_));
  EXPECT_FALSE(hit.has_value());
  EXPECT_FALSE(reader->PublishedModel(fp_.model_id()).has_value());
  EXPECT_EQ(reader->stats().values_read, 0);
  EXPECT_EQ(reader->stats().forged + reader->stats().corrupt, 0);
}

// A server that joins with an empty memory and disk learns the model's
// structure from the tier and is served another server's prefix, bit for bit.
TEST_F(SealedTierTest, AFreshServerIsServedFromItsFirstRequest) {
  for (const std::string secret : {"s", ""}) {
    SCOPED_TRACE("secret '" + secret + "'");
    backend_ = NewMemKvBackend();
    auto writer_tier = OpenTier(backend_.get(), kC, secret, false, "old");
    ServerPromptCache writer({.shared = writer_tier.get()});
    ASSERT_OK(writer.Insert(fp_, tokens_, cache_));
    writer.Flush();
    EXPECT_EQ(writer_tier->stats().models_published, 1);

    auto fresh_tier = OpenTier(backend_.get(), kC, secret, false, "new");
    ServerPromptCache fresh({.shared = fresh_tier.get()});
    EXPECT_FALSE(fresh_tier->PublishedModel("another-model").has_value());
    std::optional<ModelFingerprint> model = fresh_tier->PublishedModel(fp_.model_id());
    ASSERT_TRUE(model.has_value());
    EXPECT_EQ(model->json(), fp_.json());
    ASSERT_OK_AND_ASSIGN(auto hit, fresh.Fetch(*model, tokens_));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tier, PromptCacheTier::kShared);
    EXPECT_EQ(hit->reused, 3 * kC - 1);  // the whole prompt less its last token
    EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(cache_, hit->reused)));
    // Another secret finds nothing.
    auto stranger = OpenTier(backend_.get(), kC, secret.empty() ? "t" : secret + "t");
    EXPECT_FALSE(stranger->PublishedModel(fp_.model_id()).has_value());
  }
}

// A model record with a changed byte, or moved to another model's key, is
// refused and counted; the fresh server then knows no structure.
TEST_F(SealedTierTest, AForgedModelRecordIsRefused) {
  auto tier = OpenTier(backend_.get(), kC, "s");
  ASSERT_OK(tier->Insert(fp_, tokens_, cache_));
  const ChunkSealing sealing{"s", "kvstore:"};
  const std::string key = ModelRecordKey(sealing, fp_.model_id(), kC);
  const std::string record = Value(key);
  std::string bad = record;
  bad[bad.size() / 2] ^= 1;
  Replace(key, bad);
  EXPECT_FALSE(tier->PublishedModel(fp_.model_id()).has_value());
  EXPECT_EQ(tier->stats().forged, 1);
  const std::string other = ModelRecordKey(sealing, "other-model", kC);
  Replace(other, record);
  EXPECT_FALSE(tier->PublishedModel("other-model").has_value());
  EXPECT_EQ(tier->stats().forged, 2);
}

}  // namespace
}  // namespace kvstore
