#include "kvstore/json.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "libkvstore/util/json_text.h"
#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

Json MustParse(std::string_view text) {
  auto r = Json::Parse(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : Json();
}

TEST(JsonTest, ParsesEveryKindAndKeepsMemberOrder) {
  Json j = MustParse(R"( {"b": [1, -2, 3.5, true, false, null], "a": {"x": "y"}, "c": ""} )");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.as_object()[0].first, "b");
  EXPECT_EQ(j.as_object()[1].first, "a");
  const Json& b = *j.Find("b");
  EXPECT_EQ(b.as_array()[1].as_int(), -2);
  EXPECT_EQ(b.as_array()[2].as_double(), 3.5);
  EXPECT_TRUE(b.as_array()[3].as_bool());
  EXPECT_TRUE(b.as_array()[5].is_null());
  EXPECT_EQ(j.Find("a")->Find("x")->as_string(), "y");
  EXPECT_EQ(j.Find("nope"), nullptr);
}

TEST(JsonTest, IntegersAreExact) {
  EXPECT_EQ(MustParse("9223372036854775807").as_int(), INT64_MAX);
  EXPECT_EQ(MustParse("-9223372036854775808").as_int(), INT64_MIN);
  Json u = MustParse("18446744073709551615");
  EXPECT_EQ(u.type(), Json::Type::kUint);
  EXPECT_EQ(u.as_uint(), UINT64_MAX);
  EXPECT_EQ(MustParse("18446744073709551616").type(), Json::Type::kDouble);
  EXPECT_EQ(MustParse("1e2").type(), Json::Type::kDouble);
  EXPECT_EQ(Json(uint64_t{5}).type(), Json::Type::kInt);
}

TEST(JsonTest, StringsDecodeEscapesAndSurrogates) {
  EXPECT_EQ(MustParse(R"("a\"b\\c\/\b\f\n\r\t")").as_string(), "a\"b\\c/\b\f\n\r\t");
  EXPECT_EQ(MustParse(R"("\u00e9\u20ac\ud83d\ude00")").as_string(), "é€😀");
  EXPECT_EQ(MustParse("\"é😀\"").as_string(), "é😀");
}

TEST(JsonTest, RejectsMalformedInputWithOffsets) {
  const char* bad[] = {
      "",        "{",         "[1,]",        "{\"a\":1,}",  "01",        "1.",
      "-",       ".5",        "1e",          "tru",         "nul",       "\"abc",
      "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "{\"a\" 1}", "{1:2}",
      "[1 2]",   "1 2",       "NaN",         "Infinity",    "// c\n1",   "1e999",
      "\"\t\"",  "'a'",
  };
  for (const char* text : bad) {
    EXPECT_THAT(Json::Parse(text), HasCode(StatusCode::kCorruption, "JSON")) << text;
  }
  EXPECT_THAT(Json::Parse("[1,]"), HasCode(StatusCode::kCorruption, "at byte 3"));
}

TEST(JsonTest, RejectsInvalidUtf8) {
  const std::string bad[] = {"\"\xC0\xAF\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"",
                             "\"\xE2\x82\"", "\"\x80\"",         "\"\xFF\""};
  for (const std::string& text : bad) {
    EXPECT_THAT(Json::Parse(text), HasCode(StatusCode::kCorruption, "UTF-8")) << text;
    EXPECT_FALSE(IsValidUtf8(text.substr(1, text.size() - 2)));
  }
  EXPECT_TRUE(IsValidUtf8("plain é € 😀"));
}

TEST(JsonTest, DuplicateKeysAndDepth) {
  EXPECT_THAT(Json::Parse(R"({"a":1,"a":2})"), HasCode(StatusCode::kCorruption, "duplicate key"));
  Json::ParseOptions lenient;
  lenient.reject_duplicate_keys = false;
  EXPECT_OK(Json::Parse(R"({"a":1,"a":2})", lenient));
  std::string deep(65, '[');
  deep += std::string(65, ']');
  EXPECT_THAT(Json::Parse(deep), HasCode(StatusCode::kCorruption, "deeper"));
  std::string ok(64, '[');
  ok += std::string(64, ']');
  EXPECT_OK(Json::Parse(ok));
}

TEST(JsonTest, RefusesWhatNlohmannAloneWouldAccept) {
  // A byte order mark (nlohmann skips it) and a partial one.
  EXPECT_THAT(Json::Parse("\xEF\xBB\xBF{}"),
              HasCode(StatusCode::kCorruption, "byte order mark at byte 0"));
  EXPECT_THAT(Json::Parse("\xEF\xBB{}"), HasCode(StatusCode::kCorruption, "at byte 0"));
  // A NUL byte, which nlohmann's lexer takes for the end of the input.
  using namespace std::string_literals;
  EXPECT_THAT(Json::Parse("{}\0"s),
              HasCode(StatusCode::kCorruption, "NUL byte after the JSON value at byte 2"));
  EXPECT_THAT(Json::Parse("1 \0 2"s),
              HasCode(StatusCode::kCorruption, "NUL byte after the JSON value at byte 2"));
  EXPECT_THAT(Json::Parse("[1,\0]"s), HasCode(StatusCode::kCorruption, "NUL byte at byte 3"));
  EXPECT_THAT(Json::Parse("\"a\0\""s), HasCode(StatusCode::kCorruption, "NUL byte at byte 2"));
  EXPECT_EQ(MustParse(R"("a\u0000b")").as_string(), "a\0b"s);
}

TEST(JsonTest, ErrorOffsetsNameTheByteWhereTheErrorWasDetected) {
  EXPECT_THAT(Json::Parse("{\"a\" 1}"), HasCode(StatusCode::kCorruption, "expected ':' at byte 5"));
  EXPECT_THAT(Json::Parse("[1, 2, 1e400]"),
              HasCode(StatusCode::kCorruption, "number out of range at byte 7"));
  EXPECT_THAT(Json::Parse("[\"\\u12x4\"]"), HasCode(StatusCode::kCorruption, "at byte 6"));
  EXPECT_THAT(Json::Parse("[\"ab\xC0\"]"),
              HasCode(StatusCode::kCorruption, "UTF-8 byte at byte 4"));
  EXPECT_THAT(Json::Parse("[1,2"),
              HasCode(StatusCode::kCorruption, "end of input; expected ']' at byte 4"));
  // Messages describe; they never echo the input's bytes.
  const std::string long_bad = "[\"" + std::string(100000, 'x') + "\xFF\"]";
  Result<Json> r = Json::Parse(long_bad);
  ASSERT_THAT(r, HasCode(StatusCode::kCorruption, "at byte 100002"));
  EXPECT_LT(r.status().message().size(), 200u);
}

TEST(JsonTest, NumbersBelowTheSmallestDoubleAreZero) {
  EXPECT_EQ(MustParse("1e-400").as_double(), 0.0);
  EXPECT_EQ(MustParse("-1e-400").type(), Json::Type::kDouble);
  EXPECT_EQ(MustParse("4.9e-324").as_double(), 4.9e-324);  // the smallest subnormal
  EXPECT_THAT(Json::Parse("-1e400"), HasCode(StatusCode::kCorruption, "out of range"));
}

TEST(JsonTest, DuplicateKeysAreFoundAtTheirOpeningQuote) {
  // Small object (scan), sorted keys (comparison with the previous one), and
  // a large unsorted object (ordered set).
  EXPECT_THAT(Json::Parse(R"({"b":1, "a":2, "b":3})"),
              HasCode(StatusCode::kCorruption, R"(duplicate key "b" at byte 15)"));
  EXPECT_THAT(Json::Parse(R"({"a":1,"b":2,"c":3,"b":4})"),
              HasCode(StatusCode::kCorruption, "at byte 19"));
  std::string sorted = "{";
  std::string unsorted = "{";
  for (int i = 0; i < 1000; ++i) {
    sorted.append("\"").append(std::to_string(10000 + i)).append("\":[],");
    unsorted.append("\"").append(std::to_string(10999 - i)).append("\":{},");
  }
  EXPECT_OK(Json::Parse(sorted + "\"z\":0}"));
  EXPECT_OK(Json::Parse(unsorted + "\"z\":0}"));
  const std::string dup = "\"10500\":1}";
  EXPECT_THAT(
      Json::Parse(sorted + dup),
      HasCode(StatusCode::kCorruption, "\"10500\" at byte " + std::to_string(sorted.size())));
  EXPECT_THAT(
      Json::Parse(unsorted + dup),
      HasCode(StatusCode::kCorruption, "\"10500\" at byte " + std::to_string(unsorted.size())));
  EXPECT_THAT(Json::Parse(R"({"a":{"k":1,"k":2}})"),
              HasCode(StatusCode::kCorruption, "at byte 12"));
  EXPECT_OK(Json::Parse(R"({"a":{"k":1},"b":{"k":2}})"));  // one set per object
}

// Large unsorted objects inside large unsorted objects: each keeps its own
// set while the inner ones are parsed, and keys sharing a long prefix are
// told apart by their last byte.
TEST(JsonTest, NestedUnsortedObjectsKeepTheirOwnKeySets) {
  const std::string prefix(300, 'p');
  auto object = [&](int members, const std::string& value) {
    std::string text = "{";
    for (int i = members; i > 0; --i) text += "\"" + prefix + std::to_string(100 + i) + "\":" + value + ",";
    return text;
  };
  const std::string inner = object(20, "0") + "\"z\":0}";
  const std::string outer = object(20, inner);
  ASSERT_OK_AND_ASSIGN(Json ok, Json::Parse(outer + "\"z\":0}"));
  EXPECT_EQ(ok.size(), 21u);
  EXPECT_EQ(ok.as_object()[0].second.size(), 21u);
  const std::string dup = "\"" + prefix + "105\":1}";
  EXPECT_THAT(Json::Parse(outer + dup),
              HasCode(StatusCode::kCorruption, "at byte " + std::to_string(outer.size())));
  EXPECT_THAT(Json::Parse("[" + object(20, "0") + dup + "]"), HasCode(StatusCode::kCorruption, "duplicate key"));
}

// Keys that std::hash sends to one slot of the key table (as a hostile
// file would choose them): past 32 probes the object moves to an ordered
// set, which still finds every duplicate.
TEST(JsonTest, CollidingKeysStillFindDuplicates) {
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 60; ++i) {
    std::string key = "k" + std::to_string(i);
    if ((std::hash<std::string_view>()(key) & 255) == 0) keys.push_back(key);
  }
  std::sort(keys.rbegin(), keys.rend());  // decreasing: not the sorted fast path
  std::string text = "{";
  for (const std::string& key : keys) text += "\"" + key + "\":0,";
  ASSERT_OK_AND_ASSIGN(Json ok, Json::Parse(text + "\"other\":1}"));
  EXPECT_EQ(ok.size(), keys.size() + 1);
  const std::string dup = "\"" + keys[3] + "\":1}";
  EXPECT_THAT(Json::Parse(text + dup),
              HasCode(StatusCode::kCorruption, "\"" + keys[3] + "\" at byte " + std::to_string(text.size())));
}

// The bytes nlohmann::json::dump() writes (what mlx-lm writes), spelled out.
TEST(JsonTest, DumpWritesNlohmannBytes) {
  Json j = MustParse(
      R"({"z":1,"a":[1,2.5,-0.001,1e300,1.5e-7,123456789012.0,0.1,1e16,-3],"s":"q\"\\\n\u0001\u001f\u007fé"})");
  EXPECT_EQ(j.Dump(),
            "{\"z\":1,\"a\":[1,2.5,-0.001,1e+300,1.5e-07,123456789012.0,0.1,1e+16,-3],"
            "\"s\":\"q\\\"\\\\\\n\\u0001\\u001f\x7f\xC3\xA9\"}");
  Json::DumpOptions sorted;
  sorted.sort_keys = true;
  Json header = MustParse(
      R"({"__metadata__":null,"0.0":{"dtype":"F16","shape":[1,8],"data_offsets":[0,32]}})");
  EXPECT_EQ(header.Dump(sorted),
            R"({"0.0":{"data_offsets":[0,32],"dtype":"F16","shape":[1,8]},"__metadata__":null})");
  Json::DumpOptions pretty;
  pretty.indent = 2;
  EXPECT_EQ(MustParse(R"({"a":[1,{}],"b":[]})").Dump(pretty),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(MustParse("[18446744073709551615,-9223372036854775808,-0.0,true,null]").Dump(),
            "[18446744073709551615,-9223372036854775808,-0.0,true,null]");
  EXPECT_EQ(Json(std::numeric_limits<double>::quiet_NaN()).Dump(), "null");
  // Invalid UTF-8 (only in values built by hand) becomes U+FFFD.
  EXPECT_EQ(Json(std::string("a\xFF"
                             "b\xE2\x82"))
                .Dump(),
            "\"a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\"");
  std::string quoted;
  AppendJsonString(quoted, "k\"\n");
  EXPECT_EQ(quoted, "\"k\\\"\\n\"");
  // Members with the same key are all written.
  Json twice = Json::MakeObject();
  twice.as_object().emplace_back("k", 1);
  twice.as_object().emplace_back("k", 2);
  EXPECT_EQ(twice.Dump(sorted), R"({"k":1,"k":2})");
}

TEST(JsonTest, BuildAndRoundTrip) {
  Json j = Json::MakeObject();
  j["name"] = "kv";
  j["n"] = 3;
  j["list"] = Json::MakeArray();
  j["list"].Push(Json(1.25));
  j["list"].Push(Json());
  j["n"] = 4;  // operator[] finds the existing member
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j.Dump(), R"({"name":"kv","n":4,"list":[1.25,null]})");
  EXPECT_EQ(MustParse(j.Dump()), j);
  EXPECT_NE(MustParse("[1]"), MustParse("[1.0]"));
}

}  // namespace
}  // namespace kvstore
