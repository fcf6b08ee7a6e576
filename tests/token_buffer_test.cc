#include "kvstore/token_buffer.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;
using Tokens = std::vector<int32_t>;

Tokens ToVector(std::span<const int32_t> s) { return Tokens(s.begin(), s.end()); }

Tokens Iota(size_t n, int32_t first) {
  Tokens out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

TEST(TokenBufferTest, EmptyBufferHasNoCapacity) {
  TokenBuffer buffer;
  EXPECT_EQ(buffer.capacity(), 0);
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_TRUE(buffer.state().empty());
  EXPECT_TRUE(buffer.tokens().empty());
  // 0 tokens into an empty buffer: round_up(0) == 0, no growth.
  EXPECT_TRUE(buffer.UpdateAndFetch(Tokens{}).empty());
  EXPECT_EQ(buffer.capacity(), 0);
}

TEST(TokenBufferTest, GrowsInStepsOf256) {
  // The tokenbuffer_growth trace: 100, 100, 60, 1, 0 tokens.
  TokenBuffer buffer;
  const Tokens t0 = Iota(100, 1000), t1 = Iota(100, 2000), t2 = Iota(60, 3000);
  EXPECT_EQ(ToVector(buffer.UpdateAndFetch(t0)), t0);
  EXPECT_EQ(buffer.capacity(), 256);
  EXPECT_EQ(buffer.UpdateAndFetch(t1).size(), 200u);
  EXPECT_EQ(buffer.capacity(), 256);
  std::span<const int32_t> filled = buffer.UpdateAndFetch(t2);
  EXPECT_EQ(filled.size(), 260u);
  EXPECT_EQ(buffer.capacity(), 512);
  EXPECT_EQ(buffer.UpdateAndFetch(Tokens{7}).size(), 261u);
  EXPECT_EQ(buffer.UpdateAndFetch(Tokens{}).size(), 261u);
  EXPECT_EQ(buffer.capacity(), 512);

  Tokens expected = t0;
  expected.insert(expected.end(), t1.begin(), t1.end());
  expected.insert(expected.end(), t2.begin(), t2.end());
  expected.push_back(7);
  EXPECT_EQ(ToVector(buffer.tokens()), expected);
  // state is the whole buffer: the tokens followed by spare zeros.
  Tokens state = expected;
  state.resize(512, 0);
  EXPECT_EQ(ToVector(buffer.state()), state);
  EXPECT_EQ(buffer.size(), 261);
}

TEST(TokenBufferTest, ConstructorBufferIsExactLength) {
  TokenBuffer buffer(Tokens{5, 6, 7});
  EXPECT_EQ(buffer.capacity(), 3);
  EXPECT_EQ(ToVector(buffer.state()), (Tokens{5, 6, 7}));
  EXPECT_EQ(ToVector(buffer.tokens()), (Tokens{5, 6, 7}));
  // Even an empty append rounds the capacity up to a step.
  EXPECT_EQ(ToVector(buffer.UpdateAndFetch(Tokens{})), (Tokens{5, 6, 7}));
  EXPECT_EQ(buffer.capacity(), 256);
}

TEST(TokenBufferTest, ExactStepBoundary) {
  TokenBuffer buffer(Iota(256, 0));
  EXPECT_EQ(buffer.capacity(), 256);
  buffer.UpdateAndFetch(Tokens{});
  EXPECT_EQ(buffer.capacity(), 256);
  buffer.UpdateAndFetch(Tokens{1});
  EXPECT_EQ(buffer.capacity(), 512);
  EXPECT_EQ(buffer.tokens().back(), 1);
  EXPECT_EQ(buffer.tokens()[255], 255);
  // One append spanning several steps.
  EXPECT_EQ(buffer.UpdateAndFetch(Iota(600, 0)).size(), 857u);
  EXPECT_EQ(buffer.capacity(), 1024);
}

TEST(TokenBufferTest, ArrayInputCastsIntegersToInt32) {
  TokenBuffer buffer;
  const std::vector<uint32_t> u32 = {1, 0x80000000u, 0xFFFFFFFFu};
  Array tokens = Array::FromValues<uint32_t>(DType::kU32, {3}, u32);
  ASSERT_OK_AND_ASSIGN(std::span<const int32_t> filled, buffer.UpdateAndFetch(tokens));
  EXPECT_EQ(ToVector(filled), (Tokens{1, INT32_MIN, -1}));
  EXPECT_EQ(buffer.capacity(), 256);
  Array i32 = Array::FromInt32s({4, 5});
  ASSERT_OK_AND_ASSIGN(filled, buffer.UpdateAndFetch(i32));
  EXPECT_EQ(ToVector(filled), (Tokens{1, INT32_MIN, -1, 4, 5}));
}

TEST(TokenBufferTest, ArrayInputRejectsNonTokenArrays) {
  TokenBuffer buffer(Tokens{1});
  EXPECT_THAT(buffer.UpdateAndFetch(Array()), HasCode(StatusCode::kInvalidArgument, "undefined"));
  EXPECT_THAT(buffer.UpdateAndFetch(Array::Zeros(DType::kI32, {2, 2})),
              HasCode(StatusCode::kInvalidArgument, "1-D"));
  EXPECT_THAT(buffer.UpdateAndFetch(Array::Zeros(DType::kF32, {2})),
              HasCode(StatusCode::kInvalidArgument, "integer dtype, got F32"));
  // Unchanged: capacity still the constructor's exact length.
  EXPECT_EQ(buffer.capacity(), 1);
  EXPECT_EQ(ToVector(buffer.tokens()), (Tokens{1}));
}

}  // namespace
}  // namespace kvstore
