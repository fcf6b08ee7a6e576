#include "kvstore/json.h"

#include <nlohmann/json.hpp>

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
      "",          "{",          "[1,]",        "{\"a\":1,}", "01",         "1.",
      "-",         ".5",         "1e",          "tru",        "nul",        "\"abc",
      "\"\\x\"",   "\"\\u12\"",  "\"\\ud800\"", "\"\\udc00\"", "{\"a\" 1}",  "{1:2}",
      "[1 2]",     "1 2",        "NaN",         "Infinity",   "// c\n1",    "1e999",
      "\"\t\"",    "'a'",
  };
  for (const char* text : bad) {
    EXPECT_THAT(Json::Parse(text), HasCode(StatusCode::kCorruption, "JSON")) << text;
  }
  EXPECT_THAT(Json::Parse("[1,]"), HasCode(StatusCode::kCorruption, "at byte 3"));
}

TEST(JsonTest, RejectsInvalidUtf8) {
  const std::string bad[] = {"\"\xC0\xAF\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"",
                             "\"\xE2\x82\"", "\"\x80\"", "\"\xFF\""};
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

TEST(JsonTest, DumpMatchesNlohmann) {
  const char* docs[] = {
      R"({"z":1,"a":[1,2.5,-0.001,1e300,1.5e-7,123456789012.0,0.1,1e16,-3],"s":"q\"\\\n\u0001\u001f\u007fé"})",
      R"({"__metadata__":null,"0.0":{"dtype":"F16","shape":[1,8,4,64],"data_offsets":[0,4096]}})",
      R"([[],{},"",true,false,null,18446744073709551615,-9223372036854775808])",
  };
  for (const char* doc : docs) {
    Json ours = MustParse(doc);
    nlohmann::ordered_json theirs = nlohmann::ordered_json::parse(doc);
    EXPECT_EQ(ours.Dump(), theirs.dump()) << doc;
    Json::DumpOptions pretty;
    pretty.indent = 2;
    EXPECT_EQ(ours.Dump(pretty), theirs.dump(2)) << doc;
    Json::DumpOptions sorted;
    sorted.sort_keys = true;
    EXPECT_EQ(ours.Dump(sorted), nlohmann::json::parse(doc).dump()) << doc;
  }
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
