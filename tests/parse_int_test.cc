// ParseInt64: the integer parser of meta_state entries and layout strings.
#include "libkvstore/util/parse_int.h"

#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

TEST(ParseIntTest, StrictTakesOnlyASignAndDigits) {
  EXPECT_EQ(ParseInt64("0").value(), 0);
  EXPECT_EQ(ParseInt64("-17").value(), -17);
  EXPECT_EQ(ParseInt64("9223372036854775807").value(), INT64_MAX);
  EXPECT_EQ(ParseInt64("-9223372036854775808").value(), INT64_MIN);
  for (const char* bad : {"", "-", "+5", " 5", "5 ", "abc", "5a", "0x10", "1e3", "1_000", "--5"}) {
    EXPECT_THAT(ParseInt64(bad), HasCode(StatusCode::kInvalidArgument, "is not an integer")) << bad;
  }
}

TEST(ParseIntTest, PythonAcceptsWhatIntOfStrAccepts) {
  EXPECT_EQ(ParseInt64(" \t+42\n", IntSyntax::kPython).value(), 42);
  EXPECT_EQ(ParseInt64("\r-3\v", IntSyntax::kPython).value(), -3);
  for (const char* bad : {"", " ", "+", "+-5", "-+5", "4 2", "abc"}) {
    EXPECT_THAT(ParseInt64(bad, IntSyntax::kPython), HasCode(StatusCode::kInvalidArgument, "is not an integer"))
        << bad;
  }
}

TEST(ParseIntTest, OutOfRangeAndLongTextsAreNamed) {
  EXPECT_THAT(ParseInt64("100000000000000000000"),
              HasCode(StatusCode::kInvalidArgument, "\"100000000000000000000\" is not an integer in the int64 range"));
  const std::string long_text(100, 'x');
  EXPECT_THAT(ParseInt64(long_text),
              HasCode(StatusCode::kInvalidArgument, "\"" + std::string(40, 'x') + "...\" is not an integer"));
}

}  // namespace
}  // namespace kvstore
