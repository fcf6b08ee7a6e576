// Header-only validation (PromptCacheReader::Validate, ValidatePromptCacheFile):
// every impossible layer is refused with exactly the code and message a
// load and a re-writing conversion give, naming the layer and the rule,
// without reading a tensor byte; every file mlx-lm wrote passes.
#include "kvstore/prompt_cache_file.h"

#include <filesystem>
#include <functional>

#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;
using ::kvstore::testing::WriteRaw;

constexpr char kPath[] = "/h.safetensors";

Array F16(const Shape& shape) { return Array::Zeros(DType::kF16, shape); }
Array Typed(DType dtype, const Shape& shape) { return Array::Zeros(dtype, shape); }

// keys/values of a KVCache-like layer: [1, 2, 4, 8] (B, H, S, D).
const Shape kKV = {1, 2, 4, 8};

// An mlx-lm RotatingKVCache layer 0 with this meta_state.
Metadata Rotating(const std::vector<std::string>& meta) {
  Metadata md = {{"2.0", "RotatingKVCache"}};
  for (size_t i = 0; i < meta.size(); ++i) md.emplace_back("0.0." + std::to_string(i), meta[i]);
  return md;
}

// An mlx-lm QuantizedKVCache layer 0 (4-bit, group 64 fits D = 64: 8 packed
// words, 1 scale per row); the parts can be replaced to break it.
struct Quantized {
  Array packed = Typed(DType::kU32, {1, 2, 4, 8});
  Array scales = F16({1, 2, 4, 1});
  Array biases = F16({1, 2, 4, 1});
  std::vector<std::string> meta = {"4", "64", "4"};  // offset, group_size, bits
  Array values_packed = Typed(DType::kU32, {1, 2, 4, 8});
  bool with_biases = true;

  std::vector<NamedArray> Tensors() const {
    std::vector<NamedArray> out = {{"0.0.0", packed}, {"0.0.1", scales}, {"0.1.0", values_packed},
                                   {"0.1.1", F16({1, 2, 4, 1})}, {"0.1.2", F16({1, 2, 4, 1})}};
    if (with_biases) out.push_back({"0.0.2", biases});
    return out;
  }
  Metadata Md() const {
    return {{"2.0", "QuantizedKVCache"}, {"0.0.0", meta[0]}, {"0.0.1", meta[1]}, {"0.0.2", meta[2]}};
  }
};

struct HostileCase {
  std::string name;
  std::vector<NamedArray> tensors;
  Metadata metadata;
  StatusCode code;
  std::string message;  // after "<path>: "
};

std::vector<HostileCase> HostileCases() {
  const Array k = F16(kKV);
  std::vector<HostileCase> c;
  auto add = [&](std::string name, std::vector<NamedArray> t, Metadata md, StatusCode code, std::string msg) {
    c.push_back({std::move(name), std::move(t), std::move(md), code, std::move(msg)});
  };
  const auto corrupt = StatusCode::kCorruption;
  // ---- unknown class ----
  add("UnknownClass", {{"0.0", k}, {"0.1", k}}, {{"2.0", "NoSuchCache"}, {"0.0", ""}}, StatusCode::kNotSupported,
      "layer 0 (NoSuchCache): unknown cache class \"NoSuchCache\"");
  // ---- RotatingKVCache meta_state ----
  const std::vector<NamedArray> rot = {{"0.0", k}, {"0.1", k}};
  auto rotating = [&](std::string name, Metadata md, std::string rule) {
    add(std::move(name), rot, std::move(md), corrupt, "layer 0 (RotatingKVCache): RotatingKVCache: " + rule);
  };
  const std::string keep_rule = "meta_state needs max_size >= 1 and 0 <= keep <= max_size, got keep ";
  rotating("RotatingMaxSizeNotAnInteger", Rotating({"0", "abc", "4", "4"}),
           "meta_state field max_size \"abc\" is not an integer");
  rotating("RotatingMaxSizeEmpty", Rotating({"0", "", "4", "4"}), "meta_state field max_size \"\" is not an integer");
  rotating("RotatingMaxSizeNegative", Rotating({"0", "-11", "4", "4"}), keep_rule + "0, max_size -11");
  rotating("RotatingMaxSizeBeyondInt64", Rotating({"0", "100000000000000000000", "4", "4"}),
           "meta_state field max_size \"100000000000000000000\" is not an integer in the int64 range");
  rotating("RotatingThreeValues", Rotating({"0", "4", "4"}), "meta_state must be [keep, max_size, offset, _idx]");
  rotating("RotatingMetaIsOneString", {{"2.0", "RotatingKVCache"}, {"0.0", "abc"}},
           "meta_state must be [keep, max_size, offset, _idx]");
  rotating("RotatingIdxBeyondMaxSize", Rotating({"0", "4", "4", "5"}),
           "meta_state offset 4 / _idx 5 out of range for 4 buffered rows");
  rotating("RotatingKeepBeyondMaxSize", Rotating({"5", "4", "4", "4"}), keep_rule + "5, max_size 4");
  // _idx may pass the buffered rows only with keep == max_size (docs/format.md L8): a wrapped
  // window with keep < max_size writes at _idx, so one beyond its rows would write past them.
  rotating("RotatingIdxBeyondRowsWithKeepBelowMaxSize", Rotating({"2", "4", "11", "5"}),
           "meta_state offset 11 / _idx 5 out of range for 4 buffered rows");
  rotating("RotatingIdxBeyondOffsetWithKeepAtMaxSize", Rotating({"4", "4", "5", "6"}),
           "meta_state offset 5 / _idx 6 out of range for 4 buffered rows");
  // ---- states mlx-lm cannot save (L16-L19) ----
  rotating("RotatingRowsBeyondOffset", Rotating({"0", "16", "3", "3"}),
           "offset 3, 4 rows stored: a saved state holds at most offset rows");
  rotating("RotatingOffsetBeyondAShortWindow", Rotating({"0", "16", "8", "4"}),
           "offset 8, 4 rows stored, max_size 16: a window that has dropped rows holds at least max_size - 1");
  // ---- QuantizedKVCache ----
  auto quantized = [&](std::string name, const std::function<void(Quantized&)>& breaks, std::string rule) {
    Quantized q;
    breaks(q);
    add(std::move(name), q.Tensors(), q.Md(), corrupt, "layer 0 (QuantizedKVCache): QuantizedKVCache: " + rule);
  };
  quantized("QuantizedBits7", [](Quantized& q) { q.meta[2] = "7"; },
            "meta_state bits 7 / group size 64 are not supported");
  quantized("QuantizedGroup48", [](Quantized& q) { q.meta[1] = "48"; },
            "meta_state bits 4 / group size 48 are not supported");
  quantized("QuantizedOffsetBeyondStoredTokens", [](Quantized& q) { q.meta[0] = "5"; },
            "meta_state offset 5 outside [0, 4]");
  quantized("QuantizedOffsetBelowStoredTokens", [](Quantized& q) { q.meta[0] = "3"; },
            "offset 3, 4 rows stored: a saved state holds exactly offset rows");
  quantized("QuantizedPackedWidth", [](Quantized& q) { q.packed = Typed(DType::kU32, {1, 2, 4, 6}); },
            "packed width of the keys does not match bits 4 / group size 64");
  quantized("QuantizedScaleWidth", [](Quantized& q) { q.scales = q.biases = F16({1, 2, 4, 2}); },
            "packed width of the keys does not match bits 4 / group size 64");
  quantized("QuantizedValuesPackedWidth", [](Quantized& q) { q.values_packed = Typed(DType::kU32, {1, 2, 4, 6}); },
            "packed width of the values does not match bits 4 / group size 64");
  quantized("QuantizedMissingBiases", [](Quantized& q) { q.with_biases = false; },
            "state keys must be a list of 3 arrays (packed, scales, biases)");
  quantized("QuantizedValuesDisagreeInTokens", [](Quantized& q) {
    q.packed = Typed(DType::kU32, {1, 2, 3, 8});
    q.scales = q.biases = F16({1, 2, 3, 1});
    q.meta[0] = "3";
  }, "keys and values disagree in B, H or S");
  quantized("QuantizedPackedAsI32", [](Quantized& q) { q.packed = Typed(DType::kI32, {1, 2, 4, 8}); },
            "state keys I32[1, 2, 4, 8], F16[1, 2, 4, 1], F16[1, 2, 4, 1] is not a U32 packed rank-4 array with "
            "matching float scales/biases");
  // ---- KVCache tensors ----
  const Metadata kv = {{"2.0", "KVCache"}, {"0.0", ""}};
  const std::string kv_rule = "layer 0 (KVCache): KVCache: ";
  add("KVCacheKeysRank3", {{"0.0", F16({1, 2, 4})}, {"0.1", k}}, kv, corrupt,
      kv_rule + "keys F16[1, 2, 4] and values F16[1, 2, 4, 8] must have rank 4 [B, H, S, D]");
  add("KVCacheKeysRank5", {{"0.0", F16({1, 2, 4, 8, 1})}, {"0.1", k}}, kv, corrupt,
      kv_rule + "keys F16[1, 2, 4, 8, 1] and values F16[1, 2, 4, 8] must have rank 4 [B, H, S, D]");
  add("KVCacheBatchDisagrees", {{"0.0", k}, {"0.1", F16({2, 2, 4, 8})}}, kv, corrupt,
      kv_rule + "keys F16[1, 2, 4, 8] and values F16[2, 2, 4, 8] disagree in dimension 0");
  add("KVCacheHeadsDisagree", {{"0.0", k}, {"0.1", F16({1, 3, 4, 8})}}, kv, corrupt,
      kv_rule + "keys F16[1, 2, 4, 8] and values F16[1, 3, 4, 8] disagree in dimension 1");
  add("KVCacheTokensDisagree", {{"0.0", k}, {"0.1", F16({1, 2, 5, 8})}}, kv, corrupt,
      kv_rule + "keys F16[1, 2, 4, 8] and values F16[1, 2, 5, 8] disagree in dimension 2");
  add("KVCacheThirdTensor", {{"0.0", k}, {"0.1", k}, {"0.2", k}}, kv, corrupt,
      kv_rule + "state must be a list of 2 arrays (keys, values), got 3 entries");
  add("KVCacheMissingValues", {{"0.0", k}}, kv, corrupt,
      kv_rule + "state must be a list of 2 arrays (keys, values), got 1 entries");
  add("KVCacheIntegerKeys", {{"0.0", Typed(DType::kI32, kKV)}, {"0.1", k}}, kv, corrupt,
      kv_rule + "keys and values must be F16, BF16, F32 or F64, got I32[1, 2, 4, 8] and F16[1, 2, 4, 8]");
  add("KVCacheWithAMetaState", {{"0.0", k}, {"0.1", k}}, {{"2.0", "KVCache"}, {"0.0", "x"}}, corrupt,
      kv_rule + "this cache has no meta state and cannot be assigned 'x'");
  add("ClassNameWithoutTensors", {}, kv, corrupt,
      kv_rule + "state must be a list of 2 arrays (keys, values), got 0 entries");
  add("SecondLayerWithoutTensors", {{"0.0", k}, {"0.1", k}}, {{"2.0", "KVCache"}, {"0.0", ""}, {"2.1", "KVCache"}, {"0.1", ""}},
      corrupt, "layer 1 (KVCache): KVCache: state must be a list of 2 arrays (keys, values), got 0 entries");
  // ---- the other classes ----
  add("ChunkedChunkSizeZero", {{"0.0", k}, {"0.1", k}}, {{"2.0", "ChunkedKVCache"}, {"0.0.0", "0"}, {"0.0.1", "0"}},
      corrupt, "layer 0 (ChunkedKVCache): ChunkedKVCache: meta_state needs chunk_size >= 1 and start_position >= 0");
  add("CacheListChildImpossible", {{"0.0.0", k}, {"0.0.1", k}, {"0.1.0", k}, {"0.1.1", k}},
      {{"2.0", "CacheList"}, {"0.0.0.0", "KVCache"}, {"0.0.0.1", "RotatingKVCache"}, {"0.0.1.0", ""},
       {"0.0.1.1.0", "9"}, {"0.0.1.1.1", "4"}, {"0.0.1.1.2", "4"}, {"0.0.1.1.3", "4"}},
      corrupt,
      "layer 0 (CacheList): CacheList child 1: RotatingKVCache: meta_state needs max_size >= 1 and 0 <= keep <= "
      "max_size, got keep 9, max_size 4");
  add("CacheListChildUnknown", {{"0.0.0", k}, {"0.0.1", k}},
      {{"2.0", "CacheList"}, {"0.0.0.0", "Mystery"}, {"0.0.1.0", ""}}, StatusCode::kNotSupported,
      "layer 0 (CacheList): CacheList child 0: unknown cache class \"Mystery\"");
  const Array slot = Typed(DType::kF32, {1, 3});
  add("ArraysCacheSlotIsAList", {{"0.0.0.0", slot}, {"0.1", Typed(DType::kF32, {0})}, {"0.2", Typed(DType::kF32, {0})}},
      {{"2.0", "ArraysCache"}, {"0.0", ""}}, corrupt, "layer 0 (ArraysCache): ArraysCache: a slot must be an array or None");
  add("ArraysCachePaddingRank2", {{"0.0.0", slot}, {"0.1", Typed(DType::kI32, {1, 1})}, {"0.2", Typed(DType::kF32, {0})}},
      {{"2.0", "ArraysCache"}, {"0.0", ""}}, corrupt,
      "layer 0 (ArraysCache): ArraysCache: left_padding I32[1, 1] must be a 1-D numeric array");
  add("BatchOffsetAndPaddingDiffer", {{"0.0", k}, {"0.1", k}, {"0.2", Typed(DType::kI32, {2})}, {"0.3", Typed(DType::kI32, {1})}},
      {{"2.0", "BatchKVCache"}, {"0.0", ""}}, corrupt,
      "layer 0 (BatchKVCache): BatchKVCache: offset and left_padding must have one length, got 2 and 1");
  const std::vector<NamedArray> batch = {{"0.0", k}, {"0.1", k}, {"0.2", Typed(DType::kI32, {1})},
                                         {"0.3", Typed(DType::kI32, {1})}};
  add("BatchRotatingIdxOutOfRange", batch,
      {{"2.0", "BatchRotatingKVCache"}, {"0.0.0", "4"}, {"0.0.1", "4"}, {"0.0.2", "5"}, {"0.0.3", "False"}}, corrupt,
      "layer 0 (BatchRotatingKVCache): BatchRotatingKVCache: meta_state max_size 4, _offset 4, _idx 5 out of range");
  add("BatchRotatingRotatedNotABool", batch,
      {{"2.0", "BatchRotatingKVCache"}, {"0.0.0", "4"}, {"0.0.1", "4"}, {"0.0.2", "4"}, {"0.0.3", "yes"}}, corrupt,
      "layer 0 (BatchRotatingKVCache): BatchRotatingKVCache: meta_state rotated \"yes\" is not \"True\" or \"False\"");
  add("CacheListChildOffsetBeyondAShortWindow", {{"0.0.0", k}, {"0.0.1", k}, {"0.1.0", k}, {"0.1.1", k}},
      {{"2.0", "CacheList"}, {"0.0.0.0", "KVCache"}, {"0.0.0.1", "RotatingKVCache"}, {"0.0.1.0", ""},
       {"0.0.1.1.0", "0"}, {"0.0.1.1.1", "16"}, {"0.0.1.1.2", "8"}, {"0.0.1.1.3", "4"}},
      corrupt,
      "layer 0 (CacheList): CacheList child 1: RotatingKVCache: offset 8, 4 rows stored, max_size 16: a window that "
      "has dropped rows holds at least max_size - 1");
  std::vector<NamedArray> slots = {{"0.1", Typed(DType::kF32, {0})}, {"0.2", Typed(DType::kF32, {0})}};
  for (int i = 0; i <= 4096; ++i) slots.push_back({"0.0." + std::to_string(i), Typed(DType::kF32, {0})});
  add("ArraysCacheTooManySlots", slots, {{"2.0", "ArraysCache"}, {"0.0", ""}}, corrupt,
      "layer 0 (ArraysCache): ArraysCache: 4097 slots exceed the limit of 4096");
  // ---- mlx-swift-lm layout ----
  add("SwiftRotatingKeepBeyondMaxSize", rot,
      {{"2.0", "RotatingKVCache"}, {"0.0.0", "9"}, {"0.0.1", "4"}, {"0.0.2", "256"}, {"0.0.3", "4"}, {"0.0.4", "4"}},
      corrupt,
      "layer 0 (RotatingKVCache): RotatingKVCache: meta_state needs max_size >= 1 and 0 <= keep <= max_size, "
      "got keep 9, max_size 4");
  add("SwiftEmptyRotatingWithAnOffset", {},
      {{"2.0", "RotatingKVCache"}, {"0.0.0", "0"}, {"0.0.1", "4"}, {"0.0.2", "256"}, {"0.0.3", "3"}, {"0.0.4", "3"}},
      corrupt, "layer 0 (RotatingKVCache): RotatingKVCache: offset 3 but no tensors");
  return c;
}

// The other side of L8's _idx rule: mlx-lm reaches these states, so they load.
TEST(RotatingIdxRule, ReachableWindowsLoad) {
  const Array k = F16(kKV);  // 4 rows
  const std::vector<NamedArray> rot = {{"0.0", k}, {"0.1", k}};
  struct Window {
    const char* what;
    std::vector<std::string> meta;  // keep, max_size, offset, _idx
  };
  for (const Window& w : {Window{"wrapped, next write at the last row", {"2", "4", "11", "4"}},
                          Window{"wrapped, next write after keep", {"2", "4", "11", "3"}},
                          Window{"keep == max_size: _idx counts on past the rows", {"4", "4", "11", "9"}},
                          Window{"keep == max_size: _idx at offset", {"4", "4", "11", "11"}}}) {
    SCOPED_TRACE(w.what);
    std::unique_ptr<Env> env = NewMemEnv();
    ASSERT_OK(WriteRaw(env.get(), kPath, rot, Rotating(w.meta)));
    EXPECT_OK(ValidatePromptCacheFile(env.get(), kPath));
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(env.get(), kPath));
    EXPECT_EQ(loaded.cache.at(0)->meta_state(), MetaState::Strings(w.meta));
  }
}

class HostileLayerTest : public ::testing::TestWithParam<HostileCase> {
 protected:
  void SetUp() override { ASSERT_OK(WriteRaw(env_.get(), kPath, GetParam().tensors, GetParam().metadata)); }
  std::string Expected() const { return std::string(kPath) + ": " + GetParam().message; }
  std::unique_ptr<Env> env_ = NewMemEnv();
};

// The status must be exactly the expected code and message.
void ExpectExactly(const Status& s, StatusCode code, const std::string& message, const char* what) {
  EXPECT_EQ(s.code(), code) << what << ": " << s.ToString();
  EXPECT_EQ(s.message(), message) << what;
}

TEST_P(HostileLayerTest, ValidationRefusesItAsLoadAndConvertDo) {
  const HostileCase& c = GetParam();
  ExpectExactly(ValidatePromptCacheFile(env_.get(), kPath), c.code, Expected(), "validate");
  ExpectExactly(LoadPromptCache(env_.get(), kPath).status(), c.code, Expected(), "load");
  if (c.code == StatusCode::kCorruption) {
    // As kvtool verify: an impossible layer before the (missing) digests.
    LoadPromptCacheOptions verify;
    verify.verify = true;
    ExpectExactly(LoadPromptCache(env_.get(), kPath, verify).status(), c.code, Expected(), "verified load");
  }
  ConvertOptions convert;
  convert.output.integrity = false;
  ExpectExactly(ConvertPromptCacheFile(env_.get(), kPath, "/out", convert), c.code, Expected(), "convert");
  EXPECT_FALSE(env_->FileExists("/out"));
  if (c.code == StatusCode::kCorruption) {
    TranscodeOptions compress;
    compress.compression_level = 1;
    ExpectExactly(TranscodePromptCacheFile(env_.get(), kPath, "/out", compress), c.code, Expected(), "transcode");
  }
}

TEST_P(HostileLayerTest, InspectionListsTheProblemUnderItsLayer) {
  const HostileCase& c = GetParam();
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env_.get(), kPath));
  // "layer i (Class): rule" -> layer i, rule
  const size_t colon = c.message.find("): ");
  const size_t layer = std::stoul(c.message.substr(6));
  const std::string rule = c.message.substr(colon + 3);
  ASSERT_LT(layer, info.layers.size());
  if (c.code == StatusCode::kCorruption) {
    EXPECT_FALSE(info.valid());
    EXPECT_EQ(info.layers[layer].errors, std::vector<std::string>{rule});
  } else {
    EXPECT_TRUE(info.valid());
    EXPECT_EQ(info.layers[layer].unsupported, rule);
  }
}

INSTANTIATE_TEST_SUITE_P(All, HostileLayerTest, ::testing::ValuesIn(HostileCases()),
                         [](const ::testing::TestParamInfo<HostileCase>& p) { return p.param.name; });

TEST(HostileLayerCasesTest, CoverEveryKindTheIssueListsAndMore) { EXPECT_EQ(HostileCases().size(), 46u); }

// Every file mlx-lm wrote (all versions) passes, as it loads.
TEST(ValidateTest, EveryFixtureIsValid) {
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(testing::FixturePath("mlx-lm"))) {
    if (e.path().extension() != ".safetensors") continue;
    SCOPED_TRACE(e.path().string());
    ++files;
    ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), e.path().string()));
    EXPECT_TRUE(info.valid());
    EXPECT_OK(ValidatePromptCacheFile(Env::Default(), e.path().string()));
    EXPECT_OK(LoadPromptCache(Env::Default(), e.path().string()));
  }
  EXPECT_EQ(files, 24u);  // 19 written by mlx-lm HEAD, 3 by v0.31.3, 2 by v0.30.5
}

// A compressed file is validated from its header frame alone: data frames
// that fail to decompress are never touched.
TEST(ValidateTest, ReadsNoTensorByte) {
  std::unique_ptr<Env> env = NewMemEnv();
  auto rot = std::make_shared<RotatingKVCache>(64, 1);
  const Array k = testing::RandomArray(DType::kF16, {1, 2, 64, 64}, 5);
  ASSERT_OK(rot->UpdateAndFetch(k, k));
  SavePromptCacheOptions compressed;
  compressed.compression_level = 1;
  compressed.frame_size = 4096;
  ASSERT_OK(SavePromptCache(env.get(), "/c", {rot}, {}, compressed));
  std::vector<std::byte> bytes = testing::FileBytes(env.get(), "/c");
  bytes[bytes.size() / 2] ^= std::byte{0xff};  // inside a data frame
  ASSERT_OK(WriteStringAtomic(env.get(), "/c", bytes));
  EXPECT_OK(ValidatePromptCacheFile(env.get(), "/c"));
  EXPECT_FALSE(LoadPromptCache(env.get(), "/c").ok());
  // SavePromptCache stores the header frame raw: _idx 64 becomes 65, beyond
  // the 64 rows the tensors hold.
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t at = text.find("\"0.0.3\":\"64\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 10] = std::byte{'5'};
  ASSERT_OK(WriteStringAtomic(env.get(), "/c", bytes));
  EXPECT_THAT(ValidatePromptCacheFile(env.get(), "/c"),
              HasCode(StatusCode::kCorruption, "/c: layer 0 (RotatingKVCache): RotatingKVCache: meta_state offset 64 / "
                                                 "_idx 65 out of range for 64 buffered rows"));
}

}  // namespace
}  // namespace kvstore
