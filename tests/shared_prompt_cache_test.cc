// SharedPromptCache's behaviour over the in-memory backend: sharing and
// dedup across writers, chains that end at a missing chunk, refusal of
// corrupt, forged, copied and foreign values, fingerprints, the insert
// queue, backend failures.
#include <thread>

#include "kvstore/batch_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_bytes.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe;
using testing::FaultyBackend;
using testing::HasCode;
using testing::Iota;
using testing::OpenTier;
using testing::Prefill;
using testing::Tokens;
using testing::TrimmedTo;

constexpr int64_t kC = 8;

PromptCache TwoLayers(int64_t tokens, uint64_t seed) {
  PromptCache cache = {std::make_shared<KVCache>(), std::make_shared<KVCache>()};
  for (size_t l = 0; l < cache.size(); ++l) Prefill(*cache[l], tokens, 5, seed * 10 + l, 2, 16);
  return cache;
}

Tokens Concat(const Tokens& a, const Tokens& b) {
  Tokens out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

class SharedPromptCacheTest : public ::testing::Test {
 protected:
  // A 3-chunk shared prefix, then two different continuations.
  const Tokens system_ = Iota(3 * kC, 100);
  const Tokens first_ = Concat(system_, Iota(2 * kC + 5, 5000));
  const Tokens second_ = Concat(system_, Iota(kC + 2, 9000));
  const PromptCache first_cache_ = TwoLayers(static_cast<int64_t>(first_.size()), 1);
  const ModelFingerprint fp_ = testing::FingerprintOf(first_cache_);
  std::unique_ptr<KvBackend> backend_ = NewMemKvBackend();

  // The key of chunk i of `tokens` in a tier sealed with `secret` ("": unsealed).
  std::string KeyOf(const Tokens& tokens, int64_t i, ChunkKind kind = ChunkKind::kRows,
                    std::string_view secret = {}) const {
    const ChunkNamespace ns = MakeChunkNamespace(fp_, kC, {secret, "kvstore:"});
    return ChunkKey("kvstore:", ns, kind, ChainHashes(ns, tokens, static_cast<size_t>(i + 1))[i]);
  }
  std::string Value(const std::string& key) { return testing::ValueOf(*backend_, key); }
  void Replace(const std::string& key, const std::string& value) { testing::ReplaceValue(*backend_, key, value); }
  bool Has(const std::string& key) { return (*backend_->Exists(std::vector<std::string>{key}))[0]; }
};

TEST_F(SharedPromptCacheTest, WritersShareTheChunksOfACommonPrefix) {
  auto a = OpenTier(backend_.get(), kC, "", false, "server-a");
  auto b = OpenTier(backend_.get(), kC, "", false, "server-b");
  ASSERT_OK(a->Insert(fp_, first_, first_cache_));
  EXPECT_EQ(a->stats().chunks_written, 5);

  // Another server, another conversation on the same system prompt.
  ASSERT_OK_AND_ASSIGN(auto hit, b->Fetch(fp_, second_));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 3 * kC);
  EXPECT_EQ(hit->foreign_tokens, 3 * kC);
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(first_cache_, 3 * kC)));
  // b continues from the hit and stores only what is new.
  for (auto& layer : hit->cache) Prefill(*layer, static_cast<int64_t>(second_.size()) - 3 * kC, 3, 77, 2, 16);
  ASSERT_OK(b->Insert(fp_, second_, hit->cache));
  EXPECT_EQ(b->stats().chunks_present, 3);
  EXPECT_EQ(b->stats().chunks_written, 1);
  EXPECT_LT(b->stats().bytes_written, a->stats().bytes_written / 4);
  // a inserting again writes nothing.
  ASSERT_OK(a->Insert(fp_, first_, first_cache_));
  EXPECT_EQ(a->stats().chunks_written, 5);
  EXPECT_EQ(a->stats().chunks_present, 5);
  // Its own chunks are not foreign to a.
  ASSERT_OK_AND_ASSIGN(auto own, a->Fetch(fp_, first_));
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->tokens, 5 * kC);
  EXPECT_EQ(own->foreign_tokens, 0);
}

// A cache holding fewer tokens than its key would be cut into chunks that
// claim positions it does not hold: refused before anything is queued or
// written (an asynchronous insert would only count it).
TEST_F(SharedPromptCacheTest, InsertRefusesLayersHoldingAnotherTokenCount) {
  auto tier = OpenTier(backend_.get(), kC, "", /*async=*/true);
  const PromptCache shorter = TwoLayers(static_cast<int64_t>(first_.size()) - 3, 1);
  EXPECT_THAT(tier->Insert(fp_, first_, shorter),
              testing::HasCode(StatusCode::kInvalidArgument, "shared tier: layer 0 (KVCache): offset 42 != 45 tokens"));
  tier->Flush();
  EXPECT_FALSE(Has(KeyOf(first_, 0)));
}

TEST_F(SharedPromptCacheTest, AChunkMissingFromTheMiddleEndsThePrefix) {
  auto tier = OpenTier(backend_.get(), kC);
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  ASSERT_OK(backend_->Delete(std::vector<std::string>{KeyOf(first_, 2)}));  // evicted
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 2 * kC);
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(first_cache_, 2 * kC)));
  ASSERT_OK(backend_->Delete(std::vector<std::string>{KeyOf(first_, 0)}));
  ASSERT_OK_AND_ASSIGN(auto miss, tier->Fetch(fp_, first_));
  EXPECT_FALSE(miss.has_value());
}

TEST_F(SharedPromptCacheTest, CorruptValuesAreCountedDeletedAndNeverServed) {
  auto tier = OpenTier(backend_.get(), kC);
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  const std::string key = KeyOf(first_, 1);
  const std::string good = Value(key);
  // A flipped byte in the data, a truncation, garbage, and one in the header.
  const std::vector<std::string> bad = {
      good.substr(0, good.size() - 3) + char(good[good.size() - 3] ^ 0x40) + good.substr(good.size() - 2),
      good.substr(0, good.size() / 2), std::string("not a chunk"),
      good.substr(0, 40) + char(good[40] ^ 1) + good.substr(41)};
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(i);
    Replace(key, bad[i]);
    ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tokens, kC);
    EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(first_cache_, kC)));
    EXPECT_EQ(tier->stats().corrupt, static_cast<int64_t>(i + 1));
    EXPECT_EQ(tier->stats().deleted, static_cast<int64_t>(i + 1));
    EXPECT_FALSE(Has(key));
  }
  // The next insert puts it back.
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  EXPECT_EQ(Value(key), good);
}

// With a secret, a value with valid digests but no envelope, or an
// envelope sealed with another secret, is refused: writing to the store is
// not enough to plant KV.
TEST_F(SharedPromptCacheTest, ForgedChunksWithValidDigestsAreRefused) {
  auto tier = OpenTier(backend_.get(), kC, "the secret");
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  const PromptCache planted = TwoLayers(static_cast<int64_t>(first_.size()), 666);
  const std::string key = KeyOf(first_, 0, ChunkKind::kRows, "the secret");
  for (const std::string forger_secret : {"", "a guess"}) {
    SCOPED_TRACE("forger secret '" + forger_secret + "'");
    std::unique_ptr<KvBackend> scratch = NewMemKvBackend();
    auto forger = OpenTier(scratch.get(), kC, forger_secret);
    ASSERT_OK(forger->Insert(fp_, first_, planted));
    auto forged = scratch->Get(std::vector<std::string>{KeyOf(first_, 0, ChunkKind::kRows, forger_secret)});
    ASSERT_OK(forged);
    ASSERT_TRUE((*forged)[0].has_value());
    if (forger_secret.empty()) {
      // The forged value is a well-formed chunk whose digests verify.
      LoadPromptCacheOptions verify;
      verify.verify = true;
      ASSERT_OK(LoadPromptCacheFromString(std::make_shared<const std::string>(*(*forged)[0]), verify));
    }
    Replace(key, *(*forged)[0]);
    const int64_t before = tier->stats().forged;
    ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_));
    EXPECT_FALSE(hit.has_value());
    EXPECT_EQ(tier->stats().forged, before + 1);
    EXPECT_FALSE(Has(key));
    ASSERT_OK(tier->Insert(fp_, first_, first_cache_));  // heal
  }
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(first_cache_, 5 * kC)));
}

// An empty secret is not "no secret": it is refused, so a secret read from
// an unset variable with a "" default cannot turn the seal off unnoticed.
TEST_F(SharedPromptCacheTest, AnEmptySecretIsRefused) {
  const SharedPromptCacheOptions empty{.backend = backend_.get(), .secret = std::string()};
  EXPECT_THAT(SharedPromptCache::CheckOptions(empty),
              HasCode(StatusCode::kInvalidArgument, "shared tier: empty secret (give none for no seal)"));
  EXPECT_THAT(SharedPromptCache::Open(empty).status(),
              HasCode(StatusCode::kInvalidArgument, "shared tier: empty secret (give none for no seal)"));
  const SharedPromptCacheOptions none{.backend = backend_.get()};
  EXPECT_OK(SharedPromptCache::CheckOptions(none));
  ASSERT_OK_AND_ASSIGN(auto unsealed, SharedPromptCache::Open(none));
  EXPECT_EQ(unsealed->Describe(), "shared tier on " + backend_->Describe() + ", 256-token chunks");
  ASSERT_OK_AND_ASSIGN(auto sealed, SharedPromptCache::Open({.backend = backend_.get(), .secret = "s"}));
  EXPECT_EQ(sealed->Describe(), "shared tier on " + backend_->Describe() + ", 256-token chunks, sealed");
}

// A valid chunk copied under another key: the seal binds the key name;
// without a secret the chunk's own position and tokens give it away.
TEST_F(SharedPromptCacheTest, AValidChunkUnderAnotherKeyIsRefused) {
  for (const std::string secret : {"the secret", ""}) {
    SCOPED_TRACE("secret '" + secret + "'");
    backend_ = NewMemKvBackend();
    auto tier = OpenTier(backend_.get(), kC, secret);
    const Tokens other = Concat(Iota(kC, 7), Iota(kC, 8));
    const PromptCache other_cache = TwoLayers(2 * kC, 2);
    ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
    ASSERT_OK(tier->Insert(fp_, other, other_cache));
    // other's chunk 1 replaced by first_'s chunk 1 (same position, other tokens),
    // then by first_'s chunk 0 (another position).
    for (int64_t from : {1, 0}) {
      Replace(KeyOf(other, 1, ChunkKind::kRows, secret), Value(KeyOf(first_, from, ChunkKind::kRows, secret)));
      ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, other));
      ASSERT_TRUE(hit.has_value());
      EXPECT_EQ(hit->tokens, kC);
      EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(other_cache, kC)));
      EXPECT_FALSE(Has(KeyOf(other, 1, ChunkKind::kRows, secret)));
    }
    const SharedPromptCache::Stats s = tier->stats();
    EXPECT_EQ(secret.empty() ? s.mismatched : s.forged, 2);
    EXPECT_EQ(s.deleted, 2);
  }
}

// Without a secret, at every chain position including the first (no
// parent), a valid chunk of another prompt with the same parent copied
// under this prompt's key is refused by comparing the tokens it holds with
// the key's; the prefix before it is still served.
TEST_F(SharedPromptCacheTest, ACopiedChunkIsRefusedAtEveryChainPosition) {
  auto tier = OpenTier(backend_.get(), kC);
  for (int64_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("chain position " + std::to_string(i));
    const Tokens shared = Iota(i * kC, 100);
    const Tokens a = Concat(shared, Iota(kC, 5000)), b = Concat(shared, Iota(kC, 9000));
    const PromptCache a_cache = TwoLayers((i + 1) * kC, 10 + i), b_cache = TwoLayers((i + 1) * kC, 20 + i);
    ASSERT_OK(tier->Insert(fp_, a, a_cache));
    ASSERT_OK(tier->Insert(fp_, b, b_cache));
    Replace(KeyOf(b, i), Value(KeyOf(a, i)));
    const SharedPromptCache::Stats before = tier->stats();
    ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, b));
    EXPECT_EQ(hit.has_value() ? hit->tokens : 0, i * kC);
    EXPECT_EQ(tier->stats().mismatched, before.mismatched + 1);
    EXPECT_EQ(tier->stats().deleted, before.deleted + 1);
    EXPECT_EQ(tier->stats().last_refusal, "shared tier: " + KeyOf(b, i) + ": holds other tokens");
    EXPECT_FALSE(Has(KeyOf(b, i)));
  }
}

TEST_F(SharedPromptCacheTest, AnotherModelNeverSeesTheChunks) {
  auto tier = OpenTier(backend_.get(), kC);
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  // Same layers, another model id; same model id, another dtype.
  ModelSpec spec = fp_.spec();
  spec.model_id = "another-model";
  ASSERT_OK_AND_ASSIGN(ModelFingerprint other_model, ModelFingerprint::Make(spec));
  spec = fp_.spec();
  spec.layers[1].dtype = DType::kBF16;
  ASSERT_OK_AND_ASSIGN(ModelFingerprint other_dtype, ModelFingerprint::Make(spec));
  for (const ModelFingerprint& fp : {other_model, other_dtype}) {
    ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp, first_));
    EXPECT_FALSE(hit.has_value());
  }
  // Even with the other namespace's keys pointing at these values.
  const ChunkNamespace ns = MakeChunkNamespace(other_model, kC);
  const std::string key = ChunkKey("kvstore:", ns, ChunkKind::kRows, ChainHashes(ns, first_, 1)[0]);
  ASSERT_OK(backend_->PutIfAbsent(std::vector<KvPut>{{key, Value(KeyOf(first_, 0))}}));
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(other_model, first_));
  EXPECT_FALSE(hit.has_value());
  EXPECT_EQ(tier->stats().mismatched, 1);
  // A cache that does not match the fingerprint it is inserted under.
  EXPECT_THAT(tier->Insert(other_dtype, first_, first_cache_), testing::HasCode(StatusCode::kInvalidArgument, "dtype"));
}

TEST_F(SharedPromptCacheTest, ValuesArePromptCacheFilesWithTheChunkInTheirMetadata) {
  auto tier = OpenTier(backend_.get(), kC, "", false, "writer-7");
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  auto value = std::make_shared<const std::string>(Value(KeyOf(first_, 2)));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenPromptCacheReader(value));
  ASSERT_EQ(reader->num_layers(), 2u);
  EXPECT_EQ(reader->info().layers[0].class_name, "KVCache");
  EXPECT_EQ(reader->info().layers[0].offset, kC);
  ASSERT_OK_AND_ASSIGN(VerifyReport verified, reader->Verify());
  EXPECT_TRUE(verified.ok());
  EXPECT_EQ(reader->info().digest_algorithm, DigestAlgorithm::kXxh3_128);
  std::map<std::string, std::string> meta(reader->info().user_metadata.begin(), reader->info().user_metadata.end());
  EXPECT_EQ(meta["kvstore_chunk_format"], "kvstore-chunk/2");
  EXPECT_EQ(meta["kvstore_chunk_index"], "2");
  EXPECT_EQ(meta["kvstore_chunk_writer"], "writer-7");
  EXPECT_EQ(meta["kvstore_chunk_layers"], "0,1");
  EXPECT_FALSE(reader->info().header.FindMetadata("1.kvstore_hmac_sha256").has_value());
  // The namespace descriptor names the model.
  auto names = backend_->Scan("kvstore:v2/ns/", 10);
  ASSERT_OK(names);
  ASSERT_EQ(names->size(), 1u);
  EXPECT_NE(Value((*names)[0]).find(fp_.json()), std::string::npos);
}

TEST_F(SharedPromptCacheTest, CompressedChunksRoundTrip) {
  SharedPromptCacheOptions options{.backend = backend_.get(), .chunk_tokens = kC, .compression_level = 3,
                                   .async_insert = false};
  ASSERT_OK_AND_ASSIGN(auto tier, SharedPromptCache::Open(options));
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(first_cache_, 5 * kC)));
  EXPECT_EQ(Value(KeyOf(first_, 0)).substr(0, 4), "\x28\xb5\x2f\xfd");  // zstd magic
}

TEST_F(SharedPromptCacheTest, AFetchThatCannotBeatTheOtherTiersReadsNothing) {
  auto tier = OpenTier(backend_.get(), kC);
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  ASSERT_OK_AND_ASSIGN(auto none, tier->Fetch(fp_, first_, 5 * kC));
  EXPECT_FALSE(none.has_value());
  EXPECT_EQ(tier->stats().values_read, 0);
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_, 5 * kC - 1));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 5 * kC);
  ASSERT_OK_AND_ASSIGN(auto short_query, tier->Fetch(fp_, std::span(first_).first(kC - 1)));
  EXPECT_FALSE(short_query.has_value());
}

TEST_F(SharedPromptCacheTest, BackendFailuresAreMissesAndErrors) {
  FaultyBackend faulty(backend_.get());
  auto tier = OpenTier(&faulty, kC);
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  faulty.FailAll(true);
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_));
  EXPECT_FALSE(hit.has_value());
  EXPECT_THAT(tier->Insert(fp_, second_, TwoLayers(static_cast<int64_t>(second_.size()), 2)),
              testing::HasCode(StatusCode::kIOError, "injected"));
  EXPECT_EQ(tier->stats().backend_errors, 2);
  faulty.FailAll(false);
  ASSERT_OK_AND_ASSIGN(auto again, tier->Fetch(fp_, first_));
  EXPECT_TRUE(again.has_value());
  // A backend that answers a batch with too few results.
  faulty.ShortResults(true);
  ASSERT_OK_AND_ASSIGN(auto broken, tier->Fetch(fp_, first_));
  EXPECT_FALSE(broken.has_value());
  EXPECT_THAT(tier->Insert(fp_, second_, TwoLayers(static_cast<int64_t>(second_.size()), 2)),
              testing::HasCode(StatusCode::kIOError, "results for"));
  EXPECT_EQ(tier->stats().backend_errors, 4);
}

// A stalled store never holds a request thread: inserts queue up to the
// capacity, the rest are dropped and counted.
TEST_F(SharedPromptCacheTest, InsertsAreQueuedAndDroppedWhenTheQueueIsFull) {
  FaultyBackend faulty(backend_.get());
  SharedPromptCacheOptions options{.backend = &faulty, .chunk_tokens = kC, .insert_queue_capacity = 2};
  ASSERT_OK_AND_ASSIGN(auto tier, SharedPromptCache::Open(options));
  faulty.Hold();
  ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  while (faulty.calls() == 0) std::this_thread::yield();  // the writer took it and is stuck
  for (int i = 0; i < 4; ++i) ASSERT_OK(tier->Insert(fp_, first_, first_cache_));
  EXPECT_EQ(tier->stats().inserts, 5);
  EXPECT_EQ(tier->stats().inserts_dropped, 2);
  faulty.Release();
  tier->Flush();
  EXPECT_EQ(tier->stats().chunks_written, 5);
  EXPECT_EQ(tier->stats().chunks_present, 10);
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp_, first_));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 5 * kC);
}

TEST_F(SharedPromptCacheTest, ModelsItCannotChunkAlwaysMiss) {
  auto tier = OpenTier(backend_.get(), kC);
  auto batch = std::make_shared<BatchKVCache>(std::vector<int32_t>{0});
  Prefill(*batch, 2 * kC, 4, 3);
  const ModelFingerprint fp = testing::FingerprintOf({batch});
  ASSERT_OK(tier->Insert(fp, Iota(2 * kC), {batch}));
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp, Iota(2 * kC)));
  EXPECT_FALSE(hit.has_value());
  EXPECT_EQ(tier->stats().unsupported, 2);
  ASSERT_OK_AND_ASSIGN(auto none, backend_->Scan("", 100));
  EXPECT_TRUE(none.empty());
}

TEST_F(SharedPromptCacheTest, BadArgumentsAreRefused) {
  EXPECT_THAT(SharedPromptCache::Open({}), testing::HasCode(StatusCode::kInvalidArgument, "backend"));
  EXPECT_THAT(SharedPromptCache::Open({.backend = backend_.get(), .chunk_tokens = 0}),
              testing::HasCode(StatusCode::kInvalidArgument, "chunk_tokens"));
  auto tier = OpenTier(backend_.get(), kC);
  const PromptCacheCheckpoint beyond[] = {{static_cast<int64_t>(first_.size()) + 1, first_cache_}};
  EXPECT_THAT(tier->Insert(fp_, first_, first_cache_, beyond), testing::HasCode(StatusCode::kInvalidArgument, "outside"));
  const PromptCacheCheckpoint wrong[] = {{kC, TwoLayers(kC + 1, 3)}};
  EXPECT_THAT(tier->Insert(fp_, first_, first_cache_, wrong), testing::HasCode(StatusCode::kInvalidArgument, "checkpoint at 8 tokens: layer 0 (KVCache): offset 9 != 8 tokens"));
}

// Many threads fetching and inserting overlapping prompts through writer
// threads (run under TSan by scripts/test.sh --tsan).
TEST_F(SharedPromptCacheTest, ConcurrentFetchAndInsert) {
  SharedPromptCacheOptions options{.backend = backend_.get(), .chunk_tokens = kC, .secret = "s",
                                   .insert_queue_capacity = 64, .writer_threads = 2};
  ASSERT_OK_AND_ASSIGN(auto tier, SharedPromptCache::Open(options));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const Tokens tokens = Concat(system_, Iota(kC * (1 + (i + t) % 3), 100 * ((i + t) % 3)));
        const PromptCache cache = TwoLayers(static_cast<int64_t>(tokens.size()), 1);
        auto hit = tier->Fetch(fp_, tokens);
        if (!hit.ok()) ++wrong;
        if (hit.ok() && *hit && (*hit)->tokens <= 3 * kC &&
            Describe((*hit)->cache) != Describe(TrimmedTo(cache, (*hit)->tokens))) {
          ++wrong;
        }
        if (!tier->Insert(fp_, tokens, cache).ok()) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  tier->Flush();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(tier->stats().insert_errors, 0);
  EXPECT_EQ(tier->stats().corrupt + tier->stats().forged + tier->stats().mismatched, 0);
}

}  // namespace
}  // namespace kvstore
