// What tools see of a shared tier: namespaces, chains and chunk headers.
#include "kvstore/shared_tier_admin.h"

#include "kvstore/kv_cache.h"
#include "libkvstore/shared_tier/chunk_codec.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;
using testing::Iota;
using testing::Prefill;
using testing::Tokens;

constexpr int64_t kC = 4;

PromptCache CacheOf(int64_t tokens) {
  auto kv = std::make_shared<KVCache>();
  Prefill(*kv, tokens, 3, 1, 2, 8);
  return {kv};
}

class SharedTierAdminTest : public ::testing::Test {
 protected:
  explicit SharedTierAdminTest(std::string secret = "") : secret_(std::move(secret)) {}
  void SetUp() override {
    auto a = testing::OpenTier(backend_.get(), kC, secret_, false, "writer-a");
    auto b = testing::OpenTier(backend_.get(), kC, secret_, false, "writer-b");
    ASSERT_OK(a->Insert(fp_, first_, CacheOf(static_cast<int64_t>(first_.size()))));
    ASSERT_OK(b->Insert(fp_, second_, CacheOf(static_cast<int64_t>(second_.size()))));
  }
  std::string KeyOf(const Tokens& tokens, int64_t i) const {
    const ChunkNamespace ns = MakeChunkNamespace(fp_, kC, {secret_, "kvstore:"});
    return ChunkKey("kvstore:", ns, ChunkKind::kRows, ChainHashes(ns, tokens, static_cast<size_t>(i + 1))[i]);
  }

  // Three shared chunks, then two branches of 2 and 1 chunks.
  const Tokens first_ = Iota(5 * kC + 1);
  const Tokens second_ = [] {
    Tokens t = Iota(3 * kC);
    for (int32_t i = 0; i < kC; ++i) t.push_back(-i - 1);
    return t;
  }();
  const std::string secret_;
  const ModelFingerprint fp_ = testing::FingerprintOf(CacheOf(1));
  std::unique_ptr<KvBackend> backend_ = NewMemKvBackend();
};

class SealedSharedTierAdminTest : public SharedTierAdminTest {
 protected:
  SealedSharedTierAdminTest() : SharedTierAdminTest("s") {}
};

TEST_F(SharedTierAdminTest, NamespacesAndChains) {
  ASSERT_OK_AND_ASSIGN(auto namespaces, ListSharedNamespaces(*backend_, "kvstore:"));
  ASSERT_EQ(namespaces.size(), 1u);
  EXPECT_EQ(namespaces[0].id, MakeChunkNamespace(fp_, kC).id);
  ASSERT_TRUE(namespaces[0].fingerprint.has_value());
  EXPECT_EQ(namespaces[0].fingerprint->json(), fp_.json());
  EXPECT_EQ(namespaces[0].chunk_tokens, kC);
  EXPECT_EQ(namespaces[0].chunks, 6);
  EXPECT_EQ(namespaces[0].snapshots, 0);

  ASSERT_OK_AND_ASSIGN(auto chains, ListSharedChains(*backend_, "kvstore:", namespaces[0].id));
  ASSERT_EQ(chains.size(), 1u);
  EXPECT_EQ(chains[0].root, KeyOf(first_, 0));
  EXPECT_EQ(chains[0].chunks, 6);
  EXPECT_EQ(chains[0].longest, 5);
  EXPECT_EQ(chains[0].leaves, 2);
  EXPECT_EQ(chains[0].writers, (std::vector<std::string>{"writer-a", "writer-b"}));

  // An evicted middle chunk splits the tree: its children become roots.
  ASSERT_OK(backend_->Delete(std::vector<std::string>{KeyOf(first_, 2)}));
  ASSERT_OK_AND_ASSIGN(chains, ListSharedChains(*backend_, "kvstore:", namespaces[0].id));
  ASSERT_EQ(chains.size(), 3u);
  EXPECT_EQ(chains[0].root, KeyOf(first_, 3));
  EXPECT_EQ(chains[0].longest, 2);
  EXPECT_EQ(chains[1].longest, 2);  // chunks 0-1
  EXPECT_EQ(chains[2].root, KeyOf(second_, 3));
  EXPECT_EQ(chains[2].chunks, 1);
  ASSERT_OK_AND_ASSIGN(auto none, ListSharedNamespaces(*backend_, "other:"));
  EXPECT_TRUE(none.empty());
}

TEST_F(SharedTierAdminTest, AChunkFromItsHeader) {
  ASSERT_OK_AND_ASSIGN(SharedChunkInfo info, ReadSharedChunkInfo(*backend_, KeyOf(first_, 4)));
  EXPECT_FALSE(info.snapshot);
  EXPECT_EQ(info.index, 4);
  EXPECT_EQ(info.chunk_tokens, kC);
  EXPECT_EQ(info.writer, "writer-a");
  EXPECT_EQ(info.layers, (std::vector<std::string>{"0"}));
  EXPECT_EQ(info.classes, (std::vector<std::string>{"KVCache"}));
  ASSERT_EQ(info.tensors.size(), 2u);
  EXPECT_EQ(info.tensors[0].shape, (Shape{1, 2, kC, 8}));
  EXPECT_FALSE(info.sealed);
  EXPECT_EQ(info.value_bytes, 0u);  // the header alone was read
  EXPECT_OK(VerifySharedChunk(*backend_, KeyOf(first_, 4), ""));
  EXPECT_THAT(VerifySharedChunk(*backend_, KeyOf(first_, 4), "t"),
              HasCode(StatusCode::kCorruption, "the value is not sealed"));
  EXPECT_THAT(ReadSharedChunkInfo(*backend_, "kvstore:nope"), HasCode(StatusCode::kNotFound, "nope"));
  ASSERT_OK(backend_->PutIfAbsent(std::vector<KvPut>{{"kvstore:junk", "\x10\0\0\0\0\0\0\0{}"}}));
  EXPECT_THAT(ReadSharedChunkInfo(*backend_, "kvstore:junk"), HasCode(StatusCode::kCorruption, "kvstore:junk"));
  // A flipped tensor byte: the header still reads, verification fails.
  auto value = backend_->Get(std::vector<std::string>{KeyOf(first_, 1)});
  std::string bad = *(*value)[0];
  bad[bad.size() - 2] ^= 1;
  ASSERT_OK(backend_->Delete(std::vector<std::string>{KeyOf(first_, 1)}));
  ASSERT_OK(backend_->PutIfAbsent(std::vector<KvPut>{{KeyOf(first_, 1), bad}}));
  EXPECT_OK(ReadSharedChunkInfo(*backend_, KeyOf(first_, 1)));
  EXPECT_THAT(VerifySharedChunk(*backend_, KeyOf(first_, 1), ""),
              HasCode(StatusCode::kCorruption, "': XXH3-128 mismatch: expected "));
}

// Without a secret nothing binds a value to its key but the chunk its
// header names: a valid value copied under another key must not verify.
TEST_F(SharedTierAdminTest, AValueUnderAnotherKeyDoesNotVerifyWithoutASecret) {
  const ChunkNamespace ns = MakeChunkNamespace(fp_, kC);
  auto value_of = [&](const std::string& key) { return *(*backend_->Get(std::vector<std::string>{key}))[0]; };
  auto plant = [&](const std::string& key, const std::string& value) {
    ASSERT_OK(backend_->Delete(std::vector<std::string>{key}));
    ASSERT_OK(backend_->PutIfAbsent(std::vector<KvPut>{{key, value}}));
  };
  // first_'s chunk 3 under second_'s (same position and parent, other tokens).
  const std::string copied = value_of(KeyOf(first_, 3));
  const std::string theirs = KeyOf(second_, 3), mine = KeyOf(first_, 3);
  ASSERT_OK(VerifySharedChunk(*backend_, theirs, ""));
  plant(theirs, copied);
  const std::string their_hash = theirs.substr(theirs.size() - 64), my_hash = mine.substr(mine.size() - 64);
  EXPECT_THAT(VerifySharedChunk(*backend_, theirs, ""),
              HasCode(StatusCode::kCorruption, theirs + ": the value's chain hash " + my_hash + " is not the key's " +
                                                   their_hash + " (a value copied under another key)"));
  EXPECT_THAT(VerifySharedChunk(*backend_, theirs, "s"), HasCode(StatusCode::kCorruption, "not sealed"));
  // Under the snapshot key of its own chain hash, and under a key that names no chunk.
  const std::string snapshot_key = ChunkKeyPrefix("kvstore:", ns.id, ChunkKind::kSnapshot) + my_hash;
  plant(snapshot_key, copied);
  EXPECT_THAT(VerifySharedChunk(*backend_, snapshot_key, ""),
              HasCode(StatusCode::kCorruption, "a rows value under a snapshot key"));
  plant("kvstore:elsewhere", copied);
  EXPECT_THAT(VerifySharedChunk(*backend_, "kvstore:elsewhere", ""),
              HasCode(StatusCode::kCorruption, "holds the chunk of chain hash " + my_hash + ", but is not a chunk key"));
  // A header claiming the key's chain hash over other tokens.
  ASSERT_OK_AND_ASSIGN(SharedChunkInfo info, ReadSharedChunkInfo(*backend_, mine));
  ChunkHeader forged{.kind = ChunkKind::kRows, .ns_digest = info.ns_digest, .index = 3, .chunk_tokens = kC,
                     .tokens = Iota(kC, 77), .chain = their_hash, .parent = info.parent, .layers = {}, .writer = "w"};
  ASSERT_OK_AND_ASSIGN(std::string value, EncodeChunk(theirs, forged, {}, {}));
  plant(theirs, value);
  EXPECT_THAT(VerifySharedChunk(*backend_, theirs, ""),
              HasCode(StatusCode::kCorruption, "chain hash " + their_hash + " does not follow from its parent and tokens"));
}

TEST_F(SharedTierAdminTest, CompressedChunksAreReadWhole) {
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  ASSERT_OK_AND_ASSIGN(auto tier, SharedPromptCache::Open({.backend = backend.get(), .chunk_tokens = kC,
                                                           .compression_level = 1, .async_insert = false}));
  ASSERT_OK(tier->Insert(fp_, first_, CacheOf(static_cast<int64_t>(first_.size()))));
  ASSERT_OK_AND_ASSIGN(SharedChunkInfo info, ReadSharedChunkInfo(*backend, KeyOf(first_, 2)));
  EXPECT_TRUE(info.compressed);
  EXPECT_GT(info.value_bytes, 0u);
  EXPECT_EQ(info.index, 2);
  EXPECT_FALSE(info.sealed);
}

// Sealed values and descriptors: without the secret a tool sees that they
// are sealed and their sizes; with it, what a plain value shows.
TEST_F(SealedSharedTierAdminTest, SealedValuesOpenOnlyWithTheSecret) {
  const std::string key = KeyOf(first_, 4);
  ASSERT_OK_AND_ASSIGN(SharedChunkInfo hidden, ReadSharedChunkInfo(*backend_, key));
  EXPECT_TRUE(hidden.sealed);
  EXPECT_FALSE(hidden.opened);
  EXPECT_GT(hidden.value_bytes, 2u * kC * 8 * 2);
  EXPECT_EQ(hidden.chain, key.substr(key.size() - 64));
  EXPECT_TRUE(hidden.layers.empty());
  ASSERT_OK_AND_ASSIGN(SharedChunkInfo info, ReadSharedChunkInfo(*backend_, key, "s"));
  EXPECT_TRUE(info.sealed);
  EXPECT_TRUE(info.opened);
  EXPECT_EQ(info.index, 4);
  EXPECT_EQ(info.writer, "writer-a");
  EXPECT_EQ(info.classes, (std::vector<std::string>{"KVCache"}));
  EXPECT_OK(VerifySharedChunk(*backend_, key, "s"));
  EXPECT_THAT(VerifySharedChunk(*backend_, key, ""), HasCode(StatusCode::kCorruption, "needs the secret"));
  EXPECT_THAT(VerifySharedChunk(*backend_, key, "t"), HasCode(StatusCode::kCorruption, "does not verify"));
  EXPECT_THAT(ReadSharedChunkInfo(*backend_, key, "t"), HasCode(StatusCode::kCorruption, "does not verify"));

  ASSERT_OK_AND_ASSIGN(auto namespaces, ListSharedNamespaces(*backend_, "kvstore:"));
  ASSERT_EQ(namespaces.size(), 1u);
  EXPECT_FALSE(namespaces[0].fingerprint.has_value());
  EXPECT_EQ(namespaces[0].error, "sealed: give the secret to read it");
  EXPECT_EQ(namespaces[0].chunks, 6);
  ASSERT_OK_AND_ASSIGN(namespaces, ListSharedNamespaces(*backend_, "kvstore:", 1000, "s"));
  ASSERT_TRUE(namespaces[0].fingerprint.has_value());
  EXPECT_EQ(namespaces[0].fingerprint->json(), fp_.json());
  EXPECT_EQ(namespaces[0].id, MakeChunkNamespace(fp_, kC, {"s", "kvstore:"}).id);
  ASSERT_OK_AND_ASSIGN(auto chains, ListSharedChains(*backend_, "kvstore:", namespaces[0].id, 1000, "s"));
  ASSERT_EQ(chains.size(), 1u);
  EXPECT_EQ(chains[0].longest, 5);

  // A flipped byte anywhere: refused by the tag.
  auto value = backend_->Get(std::vector<std::string>{KeyOf(first_, 1)});
  std::string bad = *(*value)[0];
  bad[bad.size() / 2] ^= 1;
  ASSERT_OK(backend_->Delete(std::vector<std::string>{KeyOf(first_, 1)}));
  ASSERT_OK(backend_->PutIfAbsent(std::vector<KvPut>{{KeyOf(first_, 1), bad}}));
  EXPECT_THAT(VerifySharedChunk(*backend_, KeyOf(first_, 1), "s"),
              HasCode(StatusCode::kCorruption, "does not verify"));
}

}  // namespace
}  // namespace kvstore
