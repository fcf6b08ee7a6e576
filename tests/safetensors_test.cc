#include "kvstore/safetensors.h"

#include "kvstore/env.h"
#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

// [u64 N][header][data_bytes zero bytes]
std::vector<std::byte> File(std::string_view header, size_t data_bytes) {
  std::vector<std::byte> out(8);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.resize(out.size() + data_bytes, std::byte{0});
  return out;
}

Result<SafetensorsHeader> Parse(std::string_view header, size_t data_bytes) {
  std::vector<std::byte> f = File(header, data_bytes);
  return ParseSafetensors(f);
}

constexpr char kTwoTensors[] =
    R"({"a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
    R"("b":{"dtype":"I32","shape":[2],"data_offsets":[12,20]},"__metadata__":{"k":"v"}})";

TEST(SafetensorsParseTest, AcceptsAWellFormedFile) {
  ASSERT_OK_AND_ASSIGN(SafetensorsHeader h, Parse(kTwoTensors, 20));
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].shape, (Shape{2, 3}));
  EXPECT_EQ(h.tensors[1].dtype, DType::kI32);
  EXPECT_EQ(h.FindMetadata("k"), "v");
  EXPECT_EQ(h.metadata_form, SafetensorsHeader::MetadataForm::kObject);
  EXPECT_EQ(h.data_size, 20u);
  EXPECT_EQ(h.data_offset(), 8 + sizeof(kTwoTensors) - 1);
}

TEST(SafetensorsParseTest, AcceptsNullMetadataPaddingAndEmptyTensors) {
  ASSERT_OK_AND_ASSIGN(
      SafetensorsHeader h,
      Parse(R"({"__metadata__":null,"e":{"dtype":"F32","shape":[1,0,4],"data_offsets":[0,0]}}   )", 0));
  EXPECT_EQ(h.metadata_form, SafetensorsHeader::MetadataForm::kNull);
  EXPECT_EQ(h.tensors[0].nbytes(), 0u);
  ASSERT_OK_AND_ASSIGN(SafetensorsHeader empty, Parse("{}", 0));
  EXPECT_TRUE(empty.tensors.empty());
  EXPECT_EQ(empty.metadata_form, SafetensorsHeader::MetadataForm::kAbsent);
}

struct BadCase {
  const char* header;
  size_t data;
  StatusCode code;
  const char* message;
};

TEST(SafetensorsParseTest, EveryRuleHasItsOwnError) {
  const BadCase cases[] = {
      {"[]", 0, StatusCode::kCorruption, "J1"},
      {"{\"a\":1", 0, StatusCode::kCorruption, "J2"},
      {"{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[2,4]}}", 4, StatusCode::kCorruption, "duplicate key"},
      {"{\"x\":\"\xff\"}", 0, StatusCode::kCorruption, "UTF-8"},
      {R"({"__metadata__":[1]})", 0, StatusCode::kCorruption, "M1"},
      {R"({"__metadata__":{"k":1}})", 0, StatusCode::kCorruption, "M2"},
      {R"({"a":5})", 0, StatusCode::kCorruption, "T1"},
      {R"({"a":{"dtype":"F16","shape":[1]}})", 0, StatusCode::kCorruption, "T1"},
      {R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2],"x":1}})", 2, StatusCode::kCorruption, "T1"},
      {R"({"a":{"dtype":"F17","shape":[1],"data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T2"},
      {R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T2"},
      {R"({"a":{"dtype":"F16","shape":[-1],"data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T3"},
      {R"({"a":{"dtype":"F16","shape":[1.5],"data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T3"},
      {R"({"a":{"dtype":"F16","shape":"1","data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T3"},
      {R"({"a":{"dtype":"F16","shape":[4294967296,4294967296],"data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T4"},
      {R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T4"},
      {R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0]}})", 2, StatusCode::kCorruption, "T5"},
      {R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[2,0]}})", 2, StatusCode::kCorruption, "T5"},
      {R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,-2]}})", 2, StatusCode::kCorruption, "T5"},
      {R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,2]}})", 2, StatusCode::kCorruption, "T6"},
      {R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})", 4, StatusCode::kCorruption, "D1"},
      {R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})", 4, StatusCode::kCorruption, "D2"},
      {R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", 3, StatusCode::kCorruption, "D3"},
      {R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 2, StatusCode::kCorruption, "D3"},
  };
  for (const BadCase& c : cases) {
    EXPECT_THAT(Parse(c.header, c.data), HasCode(c.code, c.message)) << c.header;
  }
}

TEST(SafetensorsParseTest, HeaderLengthRules) {
  std::vector<std::byte> tiny(7);
  EXPECT_THAT(ParseSafetensors(tiny), HasCode(StatusCode::kCorruption, "H1"));
  std::vector<std::byte> f = File("{}", 0);
  f[0] = std::byte{100};  // N = 100 > file
  EXPECT_THAT(ParseSafetensors(f), HasCode(StatusCode::kCorruption, "H3"));
  f[0] = std::byte{0};
  f[7] = std::byte{1};  // N = 2^56
  EXPECT_THAT(ParseSafetensors(f), HasCode(StatusCode::kResourceExhausted, "H2"));
  ParseLimits small;
  small.max_header_size = 1;
  EXPECT_THAT(ParseSafetensors(File("{}", 0), small), HasCode(StatusCode::kResourceExhausted, "H2"));
  // Exactly at the limit is fine.
  ParseLimits exact;
  exact.max_header_size = 2;
  EXPECT_OK(ParseSafetensors(File("{}", 0), exact));
  std::vector<std::byte> all_ones(16, std::byte{0xFF});
  EXPECT_THAT(ParseSafetensors(all_ones), HasCode(StatusCode::kResourceExhausted, "H2"));
}

TEST(SafetensorsParseTest, RankLimit) {
  std::string shape = "[1";
  for (int i = 1; i < 33; ++i) shape += ",1";
  shape += "]";
  std::string header = R"({"a":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,1]}})";
  EXPECT_THAT(Parse(header, 1), HasCode(StatusCode::kCorruption, "rank 33"));
}

std::vector<NamedArray> SampleTensors() {
  Array big = testing::RandomArray(DType::kF32, {2, 4, 6}, 1);
  return {
      {"layer.0.keys", testing::RandomArray(DType::kF16, {1, 2, 5, 8}, 2)},
      {"strided", big.Slice(2, 1, 4)},  // a non-contiguous view
      {"ids", Array::FromInt32s({1, 2, 3})},
      {"flag", Array::Zeros(DType::kBool, {3})},
      {"empty", Array::Zeros(DType::kBF16, {0, 4})},
  };
}

TEST(SafetensorsWriteTest, RoundTripsThroughEveryEnv) {
  testing::TempDir dir;
  std::unique_ptr<Env> mem = NewMemEnv();
  const std::vector<NamedArray> tensors = SampleTensors();
  const Metadata metadata = {{"b", "2"}, {"a", "1"}};
  for (Env* env : {Env::Default(), mem.get()}) {
    const std::string path = dir.Join("x.safetensors");
    ASSERT_OK(WriteFileAtomic(env, path, [&](WritableFile& f) {
      return WriteSafetensors(f, tensors, metadata);
    }));
    ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(env, path));
    EXPECT_EQ(file->header().data_offset() % 8, 0u);
    EXPECT_EQ(file->header().FindMetadata("a"), "1");
    for (const NamedArray& t : tensors) {
      ASSERT_OK_AND_ASSIGN(Array a, file->Tensor(t.name));
      EXPECT_TRUE(a.ContentEquals(t.array)) << t.name;
      EXPECT_TRUE(a.is_aligned()) << t.name;
      if (t.array.numel() > 0) {
        EXPECT_FALSE(a.storage()->writable()) << t.name;  // a view of the mapping
      }
    }
    EXPECT_THAT(file->Tensor("nope"), HasCode(StatusCode::kNotFound, "nope"));
  }
}

TEST(SafetensorsWriteTest, DeterministicAlignedAndSortedLikeMlx) {
  std::unique_ptr<Env> env = NewMemEnv();
  const std::vector<NamedArray> tensors = SampleTensors();
  SafetensorsWriteOptions page;
  page.alignment = 4096;
  ASSERT_OK_AND_ASSIGN(SafetensorsLayout a, PlanSafetensors(tensors, {}, page));
  ASSERT_OK_AND_ASSIGN(SafetensorsLayout b, PlanSafetensors(tensors, {}, page));
  EXPECT_EQ(a.header_bytes, b.header_bytes);
  EXPECT_EQ(a.header_bytes.size() % 4096, 0u);
  // Keys sorted bytewise, "__metadata__": null when there is no metadata.
  const std::string json = a.header_bytes.substr(8);
  EXPECT_LT(json.find("\"empty\""), json.find("\"flag\""));
  EXPECT_NE(json.find("\"__metadata__\":null"), std::string::npos);
  // Data order: larger elements first, so every tensor is aligned.
  EXPECT_EQ(DTypeSize(a.tensors.front().dtype), 4u);
  EXPECT_EQ(a.tensors.back().dtype, DType::kBool);
  for (const TensorInfo& t : a.tensors) EXPECT_EQ(t.begin % DTypeSize(t.dtype), 0u);
  SafetensorsWriteOptions no_null;
  no_null.null_metadata_when_empty = false;
  no_null.alignment = 1;
  ASSERT_OK_AND_ASSIGN(SafetensorsLayout c, PlanSafetensors(tensors, {}, no_null));
  EXPECT_EQ(c.header_bytes.find("__metadata__"), std::string::npos);
}

TEST(SafetensorsWriteTest, RejectsBadNamesAndOptions) {
  Array x = Array::Zeros(DType::kF32, {1});
  const std::vector<NamedArray> dup = {{"a", x}, {"a", x}};
  EXPECT_THAT(PlanSafetensors(dup, {}), HasCode(StatusCode::kInvalidArgument, "duplicate"));
  const std::vector<NamedArray> reserved = {{"__metadata__", x}};
  EXPECT_THAT(PlanSafetensors(reserved, {}), HasCode(StatusCode::kInvalidArgument, "__metadata__"));
  const std::vector<NamedArray> empty = {{"", x}};
  EXPECT_THAT(PlanSafetensors(empty, {}), HasCode(StatusCode::kInvalidArgument, "empty"));
  const std::vector<NamedArray> bad_utf8 = {{"\xff", x}};
  EXPECT_THAT(PlanSafetensors(bad_utf8, {}), HasCode(StatusCode::kInvalidArgument, "UTF-8"));
  SafetensorsWriteOptions odd;
  odd.alignment = 12;
  EXPECT_THAT(PlanSafetensors(std::vector<NamedArray>{}, {}, odd), HasCode(StatusCode::kInvalidArgument, "power of two"));
}

TEST(SafetensorsWriteTest, WriteErrorsPropagateAndLeaveOldFile) {
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  const std::vector<NamedArray> tensors = SampleTensors();
  ASSERT_OK(WriteFileAtomic(&env, "/d/f", [&](WritableFile& f) { return WriteSafetensors(f, tensors, {}); }));
  ASSERT_OK_AND_ASSIGN(auto before, env.OpenReadable("/d/f"));
  std::vector<std::byte> old(before->data().begin(), before->data().end());
  env.FailNth(FaultInjectionEnv::Op::kAppend, 2);
  const std::vector<NamedArray> other = {{"z", Array::Zeros(DType::kF32, {3})}};
  EXPECT_THAT(WriteFileAtomic(&env, "/d/f", [&](WritableFile& f) { return WriteSafetensors(f, other, {}); }),
              HasCode(StatusCode::kIOError, "injected"));
  ASSERT_OK_AND_ASSIGN(auto after, env.OpenReadable("/d/f"));
  EXPECT_TRUE(std::equal(old.begin(), old.end(), after->data().begin(), after->data().end()));
}

TEST(SafetensorsFileTest, UnalignedTensorsAreCopiedAligned) {
  // A 1-byte tensor first puts the F32 tensor at an odd offset (MLX layout).
  std::unique_ptr<Env> env = NewMemEnv();
  const std::vector<NamedArray> tensors = {{"a", Array::Zeros(DType::kU8, {1})},
                                           {"b", testing::RandomArray(DType::kF32, {3}, 5)}};
  SafetensorsWriteOptions mlx;
  mlx.alignment = 1;
  mlx.data_order = SafetensorsWriteOptions::DataOrder::kByName;
  ASSERT_OK(WriteFileAtomic(env.get(), "/f", [&](WritableFile& f) { return WriteSafetensors(f, tensors, {}, mlx); }));
  ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(env.get(), "/f"));
  ASSERT_OK_AND_ASSIGN(Array b, file->Tensor("b"));
  EXPECT_TRUE(b.is_aligned());
  EXPECT_TRUE(b.ContentEquals(tensors[1].array));
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST(SafetensorsWriteTest, EveryDtypeRoundTrips) {
  std::unique_ptr<Env> env = NewMemEnv();
  std::vector<NamedArray> tensors;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    const Shape shape = {2, 3};
    std::vector<std::byte> bytes(static_cast<size_t>(6) * DTypeSize(d));
    for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<std::byte>((b * 37 + i) & 0xFF);
    if (d == DType::kBool) {
      for (auto& b : bytes) b &= std::byte{1};
    }
    tensors.push_back({std::string(DTypeName(d)), Array::FromBytes(d, shape, bytes)});
  }
  ASSERT_OK(WriteFileAtomic(env.get(), "/all", [&](WritableFile& f) { return WriteSafetensors(f, tensors, {}); }));
  ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(env.get(), "/all"));
  for (const NamedArray& t : tensors) {
    ASSERT_OK_AND_ASSIGN(Array a, file->Tensor(t.name));
    EXPECT_EQ(a.dtype(), t.array.dtype()) << t.name;
    EXPECT_TRUE(a.ContentEquals(t.array)) << t.name;
  }
}

}  // namespace
}  // namespace kvstore
