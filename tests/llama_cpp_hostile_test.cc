// Hostile ggsq files: every field of a real llama.cpp file broken in turn is
// refused with the right code and a message naming it; no input crashes.
#include <cstring>
#include <random>

#include "kvstore/llama_state.h"
#include "llama_cpp_testutil.h"
#include "testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;

std::vector<std::byte> Fixture(const std::string& name) {
  return testing::ReadFileBytes(testing::FixturePath("llama.cpp/llama_f32_d16/" + name));
}

template <typename T>
void Poke(std::vector<std::byte>& b, uint64_t offset, T v) {
  ASSERT_LE(offset + sizeof(T), b.size());
  std::memcpy(b.data() + offset, &v, sizeof(T));
}

Result<LlamaState> Parse(const std::vector<std::byte>& b) { return ParseLlamaState(b); }

class LlamaStateHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    fa1_ = Fixture("seq_fa1.ggsq");
    fa0_ = Fixture("seq_fa0.ggsq");
    ASSERT_OK_AND_ASSIGN(st1_, Parse(fa1_));
    ASSERT_OK_AND_ASSIGN(st0_, Parse(fa0_));
  }
  // Offsets of the fields of seq_fa1.ggsq (20 tokens, one stream).
  static constexpr uint64_t kNTokens = 8, kNStream = 92, kCellCount = 96, kCells = 100;
  uint64_t VTrans() const { return kCells + 12 * st1_.streams[0].cell_count(); }
  const LlamaStateLayer& L1(size_t l) const { return st1_.streams[0].layers[l]; }
  const LlamaStateLayer& L0(size_t l) const { return st0_.streams[0].layers[l]; }

  std::vector<std::byte> fa1_, fa0_;
  LlamaState st1_, st0_;
};

TEST_F(LlamaStateHostile, EveryTruncationIsCorruption) {
  for (const auto* file : {&fa1_, &fa0_}) {
    for (size_t n = 0; n < file->size(); ++n) {
      std::vector<std::byte> cut(file->begin(), file->begin() + n);
      Result<LlamaState> r = Parse(cut);
      ASSERT_TRUE(r.status().IsCorruption()) << "prefix " << n << ": " << r.status().ToString();
    }
  }
  std::vector<std::byte> cut(fa1_.begin(), fa1_.begin() + 400);
  EXPECT_THAT(Parse(cut), HasCode(StatusCode::kCorruption, "stream 0 layer 0 K data at offset 360 needs 1280 bytes, 40 remain"));
}

TEST_F(LlamaStateHostile, TrailingBytesAndASecondSection) {
  std::vector<std::byte> b = fa1_;
  b.push_back(std::byte{0});
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "1 trailing bytes after the last stream at offset 5516"));
  b = fa1_;
  b.insert(b.end(), 4, std::byte{0});  // n_stream 0 cannot start a section
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "4 trailing bytes"));
  // An iSWA model writes a second memory section for its sliding-window layers.
  b = fa1_;
  b.insert(b.end(), fa1_.begin() + kNStream, fa1_.end());
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kNotSupported, "sliding-window caches are not supported"));
}

TEST_F(LlamaStateHostile, HeaderFields) {
  std::vector<std::byte> b = fa1_;
  Poke<uint32_t>(b, 0, 0x67677370);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "magic is not 'ggsq'"));
  EXPECT_THAT(Parse(std::vector<std::byte>(3)), HasCode(StatusCode::kCorruption, "3 bytes has no magic"));
  for (uint32_t version : {1u, 3u, 0x02000000u}) {
    b = fa1_;
    Poke<uint32_t>(b, 4, version);
    EXPECT_THAT(Parse(b), HasCode(StatusCode::kNotSupported, "version " + std::to_string(version) + " (only version 2"));
  }
  b = fa1_;
  Poke<uint32_t>(b, kNTokens, 0xFFFFFFFF);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "n_tokens 4294967295 needs at least 17179869180 bytes"));
  b = fa1_;
  Poke<uint32_t>(b, kNTokens, 21);  // one token too many: everything after shifts
  EXPECT_TRUE(Parse(b).status().IsCorruption());
}

TEST_F(LlamaStateHostile, StreamCounts) {
  std::vector<std::byte> b = fa1_;
  Poke<uint32_t>(b, kNStream, 0);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "n_stream is 0"));
  Poke<uint32_t>(b, kNStream, kLlamaStateMaxStreams + 1);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kResourceExhausted, "n_stream 4097 > 4096"));
  Poke<uint32_t>(b, kNStream, 3);  // the file holds one stream
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 1 cell_count"));
  b = fa1_;
  Poke<uint32_t>(b, kCellCount, 0x40000000);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 cell_count 1073741824 needs at least"));
}

TEST_F(LlamaStateHostile, CellFields) {
  std::vector<std::byte> b = fa1_;
  Poke<uint32_t>(b, kCells + 12 * 3 + 4, 2);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 cell 3: n_seq_id 2"));
  Poke<uint32_t>(b, kCells + 12 * 3 + 4, 0);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 cell 3: n_seq_id 0"));
  b = fa1_;
  Poke<int32_t>(b, kCells + 12 * 5, -1);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 cell 5: negative position -1"));
  b = fa1_;
  Poke<int32_t>(b, kCells + 12 * 5 + 8, -3);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 cell 5: negative seq_id -3"));
}

TEST_F(LlamaStateHostile, LayerFields) {
  std::vector<std::byte> b = fa1_;
  Poke<uint32_t>(b, VTrans(), 2);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 v_trans 2 is not 0 or 1"));
  b = fa1_;
  Poke<uint32_t>(b, VTrans() + 4, 0);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 n_layer is 0"));
  Poke<uint32_t>(b, VTrans() + 4, 0x7FFFFFFF);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 n_layer 2147483647 needs at least"));
  Poke<uint32_t>(b, VTrans() + 4, 3);
  EXPECT_TRUE(Parse(b).status().IsCorruption());
  // Row sizes: not a whole number of elements, zero, or overflowing with the cells.
  for (uint64_t row : {uint64_t{63}, uint64_t{0}, uint64_t{1} << 62}) {
    b = fa1_;
    Poke<uint64_t>(b, L1(1).k_offset - 8, row);
    EXPECT_TRUE(Parse(b).status().IsCorruption()) << row;
  }
  b = fa1_;
  Poke<uint64_t>(b, L1(1).k_offset - 8, 63);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 layer 1 K row size 63 is not a positive whole number of f16 elements"));
  b = fa1_;
  Poke<uint64_t>(b, L1(0).v_offset - 8, uint64_t{1} << 32);  // 2^31 elements: the data cannot be there
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 layer 0 V data at offset 2944 needs 85899345920 bytes"));
}

TEST_F(LlamaStateHostile, TransposedVFields) {
  std::vector<std::byte> b = fa0_;
  Poke<uint32_t>(b, L0(1).v_offset - 8, 4);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 layer 1 V element size 4 != 2 for type f16"));
  b = fa0_;
  Poke<uint32_t>(b, L0(1).v_offset - 4, 0);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 layer 1 V n_embd_v_gqa is 0"));
  b = fa0_;
  Poke<uint32_t>(b, L0(1).v_offset - 4, 33);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 0 layer 1 V data at offset"));
}

TEST_F(LlamaStateHostile, QuantizedAndUnknownTypesAreRefusedByName) {
  std::vector<std::byte> b = fa1_;
  Poke<int32_t>(b, L1(0).k_offset - 12, 8);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kNotSupported, "stream 0 layer 0 K type q8_0 (ggml type 8): only f32, f16 and bf16"));
  b = fa1_;
  Poke<int32_t>(b, L1(1).v_offset - 12, 2);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kNotSupported, "stream 0 layer 1 V type q4_0"));
  b = fa1_;
  Poke<int32_t>(b, L1(1).v_offset - 12, 77);
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kNotSupported, "type 77 (ggml type 77)"));
}

// The same cells with llama.cpp's 8-byte M-RoPE extension after n_seq_id.
std::vector<std::byte> WithCellExtension(const std::vector<std::byte>& b, size_t cells, size_t ext) {
  std::vector<std::byte> out(b.begin(), b.begin() + 100);
  for (size_t i = 0; i < cells; ++i) {
    const auto cell = b.begin() + 100 + 12 * i;
    out.insert(out.end(), cell, cell + 8);
    out.insert(out.end(), ext, std::byte{0});
    out.insert(out.end(), cell + 8, cell + 12);
  }
  out.insert(out.end(), b.begin() + 100 + 12 * cells, b.end());
  return out;
}

TEST_F(LlamaStateHostile, MropeCellsAreRefusedByName) {
  EXPECT_THAT(Parse(WithCellExtension(fa1_, 20, 8)),
              HasCode(StatusCode::kNotSupported, "cells carry 8 extra bytes each (M-RoPE positions"));
  EXPECT_THAT(Parse(WithCellExtension(fa0_, 20, 12)), HasCode(StatusCode::kNotSupported, "M-RoPE caches are not supported"));
  EXPECT_THAT(Parse(WithCellExtension(fa1_, 20, 4)), HasCode(StatusCode::kCorruption, ""));
}

TEST_F(LlamaStateHostile, StreamsMustAgree) {
  // Two copies of the stream: the same layers parse; a different type does not.
  std::vector<std::byte> b(fa1_.begin(), fa1_.begin() + kNStream);
  const std::vector<std::byte> stream(fa1_.begin() + kCellCount, fa1_.end());
  b.resize(b.size() + 4);
  Poke<uint32_t>(b, kNStream, 2);
  b.insert(b.end(), stream.begin(), stream.end());
  b.insert(b.end(), stream.begin(), stream.end());
  ASSERT_OK_AND_ASSIGN(LlamaState two, Parse(b));
  EXPECT_EQ(two.streams.size(), 2u);
  const uint64_t second = kCellCount + stream.size();
  Poke<int32_t>(b, second + 4 + 12 * 20 + 8, 0);  // stream 1 layer 0 K: f32 rows of 16 elements
  EXPECT_THAT(Parse(b), HasCode(StatusCode::kCorruption, "stream 1 has other layers or v_trans than the first"));
}

TEST_F(LlamaStateHostile, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(14);
  size_t accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::byte> b = round % 2 ? fa0_ : fa1_;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      // Most flips land in the small header and cell region, where they matter.
      const size_t at = rng() % 4 == 0 ? rng() % b.size() : rng() % 400;
      b[at] = static_cast<std::byte>(rng());
    }
    Result<LlamaState> r = Parse(b);
    if (r.ok()) {
      ++accepted;
      EXPECT_EQ(r->FileBytes(), b.size());
    }
  }
  EXPECT_GT(accepted, 0u);  // flips of token ids and positions keep a valid file
}

}  // namespace
}  // namespace kvstore
