// DecodeChunk against hostile values: what the header declares (classes,
// shapes, dtypes, header size) is checked against the asked-for leaves
// before any tensor byte is decompressed or hashed.
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/shared_tier/chunk_codec.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;
using testing::Iota;
using testing::Prefill;
using testing::Tokens;

constexpr int64_t kC = 4;

// One KVCache layer (2 heads, 32 dims, F16) chunked by kC tokens.
class ChunkCodecTest : public ::testing::Test {
 protected:
  ChunkCodecTest() {
    auto kv = std::make_shared<KVCache>();
    Prefill(*kv, kC, kC, 1);
    fp_ = testing::FingerprintOf({kv}, "m");
    leaves_ = LeavesOf(fp_->spec()).value();
    ns_ = MakeChunkNamespace(*fp_, kC);
    chain_ = ChainHashes(ns_, tokens_, 1);
    key_ = ChunkKey("kvstore:", ns_, ChunkKind::kRows, chain_[0]);
  }

  ChunkHeader Header() const {
    ChunkHeader h;
    h.ns_digest = ns_.digest.ToHex();
    h.chunk_tokens = kC;
    h.tokens = tokens_;
    h.chain = chain_[0].ToHex();
    h.layers = {"0"};
    return h;
  }
  // A rows value whose piece holds `rows` rows of zeros.
  std::string RowsValue(int64_t rows, const ChunkHeader& h) const {
    const Array zeros = Array::Zeros(DType::kF16, {1, 2, rows, 32});
    auto piece = CacheFromState("KVCache", CacheState({zeros, zeros}), MetaState());
    EXPECT_TRUE(piece.ok());
    Result<std::string> value = EncodeChunk(key_, h, {std::shared_ptr<const Cache>(std::move(piece).value())}, {});
    EXPECT_TRUE(value.ok()) << value.status().ToString();
    return value.ok() ? *value : "";
  }
  Result<DecodedChunk> Decode(std::string value, ChunkFault* fault) const {
    ChunkRequest r{key_, ChunkKind::kRows, &ns_, 0, tokens_, &chain_[0], nullptr, &leaves_};
    return DecodeChunk(std::make_shared<std::string>(std::move(value)), r, fault);
  }

  const Tokens tokens_ = Iota(kC);
  std::optional<ModelFingerprint> fp_;
  std::vector<LeafInfo> leaves_;
  ChunkNamespace ns_;
  std::vector<Sha256Digest> chain_;
  std::string key_;
};

TEST_F(ChunkCodecTest, AWellFormedValueDecodes) {
  ChunkFault fault = ChunkFault::kMismatched;
  ASSERT_OK_AND_ASSIGN(DecodedChunk chunk, Decode(RowsValue(kC, Header()), &fault));
  ASSERT_EQ(chunk.rows.count("0"), 1u);
  EXPECT_EQ(chunk.rows["0"][0].shape(), (Shape{1, 2, kC, 32}));
}

// A piece declaring 64k rows whose bytes also fail their digests: the shape
// is refused from the header, before the 16 MiB of data are hashed (which
// would report the digest mismatch instead).
TEST_F(ChunkCodecTest, OversizedPiecesAreRefusedFromTheHeaderBeforeHashing) {
  std::string value = RowsValue(int64_t{1} << 16, Header());
  value.back() ^= 0x01;
  ChunkFault fault = ChunkFault::kMismatched;
  EXPECT_THAT(Decode(value, &fault),
              HasCode(StatusCode::kCorruption, "layer 0: tensor 0.0: F16[1, 2, 65536, 32], expected F16[1, 2, 4, 32]"));
  EXPECT_EQ(fault, ChunkFault::kCorrupt);
}

TEST_F(ChunkCodecTest, WrongDtypeOrClassIsRefusedFromTheHeader) {
  const Array f32 = Array::Zeros(DType::kF32, {1, 2, kC, 32});
  ASSERT_OK_AND_ASSIGN(auto piece, CacheFromState("KVCache", CacheState({f32, f32}), MetaState()));
  ASSERT_OK_AND_ASSIGN(std::string value,
                       EncodeChunk(key_, Header(), {std::shared_ptr<const Cache>(std::move(piece))}, {}));
  value.back() ^= 0x01;
  EXPECT_THAT(Decode(value, nullptr), HasCode(StatusCode::kCorruption, "tensor 0.0: F32[1, 2, 4, 32], expected F16"));

  auto rot = std::make_shared<RotatingKVCache>(8);
  Prefill(*rot, kC, kC, 2);
  ASSERT_OK_AND_ASSIGN(value, EncodeChunk(key_, Header(), {rot}, {}));
  EXPECT_THAT(Decode(value, nullptr),
              HasCode(StatusCode::kCorruption, "piece class RotatingKVCache, expected KVCache"));
}

// The two header fields that name the chunk's content, each checked on its
// own: tokens that agree with the key's do not excuse another chain hash,
// and a chain hash that agrees does not excuse other tokens.
TEST_F(ChunkCodecTest, TokensAndChainHashAreEachComparedWithTheKey) {
  const Tokens others = Iota(kC, 5000);
  ChunkHeader h = Header();
  h.chain = ChainHashes(ns_, others, 1)[0].ToHex();
  ChunkFault fault = ChunkFault::kCorrupt;
  EXPECT_THAT(Decode(RowsValue(kC, h), &fault),
              HasCode(StatusCode::kCorruption, key_ + ": holds chain hash " + h.chain.substr(0, 16)));
  EXPECT_EQ(fault, ChunkFault::kMismatched);
  h = Header();
  h.tokens = others;
  fault = ChunkFault::kCorrupt;
  EXPECT_THAT(Decode(RowsValue(kC, h), &fault), HasCode(StatusCode::kCorruption, key_ + ": holds other tokens"));
  EXPECT_EQ(fault, ChunkFault::kMismatched);
}

// A header larger than any chunk's (here a 2 MiB writer name) is refused
// before it is parsed.
TEST_F(ChunkCodecTest, AnOversizedHeaderIsRefused) {
  ChunkHeader h = Header();
  h.writer = std::string(size_t{2} << 20, 'w');
  ChunkFault fault = ChunkFault::kMismatched;
  EXPECT_THAT(Decode(RowsValue(kC, h), &fault), HasCode(StatusCode::kCorruption, "header"));
  EXPECT_EQ(fault, ChunkFault::kCorrupt);
}

}  // namespace
}  // namespace kvstore
