#include "libkvstore/util/hex.h"

#include <gtest/gtest.h>

#include <string>

namespace kvstore {
namespace {

TEST(HexTest, EncodesTwoLowercaseDigitsAByte) {
  EXPECT_EQ(HexEncode(std::string("\x00\x01\x7f\x80\xab\xff", 6)), "00017f80abff");
  EXPECT_EQ(HexEncode(std::string_view()), "");
}

TEST(HexTest, DecodesEitherCaseAndRefusesAnythingElse) {
  EXPECT_EQ(HexDecode("00017f80abff"), std::string("\x00\x01\x7f\x80\xab\xff", 6));
  EXPECT_EQ(HexDecode("ABff"), std::string("\xab\xff", 2));
  EXPECT_EQ(HexDecode(""), std::string());
  EXPECT_EQ(HexDecode("abc"), std::nullopt);   // odd length
  EXPECT_EQ(HexDecode("0g"), std::nullopt);    // not a digit
  EXPECT_EQ(HexDecode(" 0"), std::nullopt);    // no whitespace
  EXPECT_EQ(HexDecode("-1"), std::nullopt);
}

TEST(HexTest, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(HexDecode(HexEncode(all)), all);
}

}  // namespace
}  // namespace kvstore
