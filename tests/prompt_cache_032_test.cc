// mlx-lm 0.32's prompt-cache layout (docs/format.md §5.9): every class's
// full state written and read back exactly, the detection rule, the
// validation rules of the scalar list, digests and compression in the 0.32
// user namespace, conversions both ways, and the files the other version's
// loader would load as [].
#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;
using ::kvstore::testing::KV;
using ::kvstore::testing::StateFingerprint;
using ::kvstore::testing::TempDir;
using ::kvstore::testing::RandomArray;

// The full state as text: arrays by dtype, shape and digest, scalars by
// value and kind, so two caches compare exactly as 0.32 would see them.
std::string FullFingerprint(const Cache& c) {
  Result<CacheState> s = c.FullState();
  if (!s.ok()) return s.status().ToString();
  std::string out = std::string(c.class_name()) + ":";
  std::function<void(const CacheState&)> walk = [&](const CacheState& st) {
    if (st.is_array()) {
      out += st.array().Describe() + "=" + Sha256(st.array()).ToHex().substr(0, 16) + ";";
    } else if (st.is_list()) {
      out += "[";
      for (const auto& x : st.list()) walk(x);
      out += "]";
    } else {
      out += (st.is_bool() ? "bool " : st.is_int() ? "int " : "") + st.DebugString() + ";";
    }
  };
  walk(*s);
  return out;
}

std::shared_ptr<Cache> Updated(std::shared_ptr<Cache> c, int64_t b, int64_t s, int64_t d, int steps = 1) {
  for (int i = 0; i < steps; ++i) {
    EXPECT_OK(testing::Update(*c, KV(b, 2, s, d, 10 + i), KV(b, 2, s, d, 20 + i)));
  }
  return c;
}

// One cache of every class, in the states 0.32's raw buffers make visible:
// spare rows, stale rows after a trim, a wrapped window, None slots.
PromptCache EveryClass() {
  PromptCache c;
  auto kv = Updated(std::make_shared<KVCache>(), 1, 5, 8);
  EXPECT_OK(kv->Trim(2).status());  // rows 3..4 stay in the buffer
  c.push_back(kv);
  c.push_back(Updated(std::make_shared<RotatingKVCache>(8, 2), 1, 1, 8, 12));  // wrapped
  c.push_back(Updated(std::make_shared<QuantizedKVCache>(64, 4), 1, 5, 64));
  c.push_back(Updated(std::make_shared<ChunkedKVCache>(16), 1, 4, 8));
  auto arrays = std::make_shared<ArraysCache>(2);
  EXPECT_OK(arrays->SetSlot(0, RandomArray(DType::kF32, {1, 3, 4}, 5)));  // slot 1 stays None
  c.push_back(arrays);
  c.push_back(std::make_shared<CacheList>(
      std::vector<std::shared_ptr<Cache>>{Updated(std::make_shared<KVCache>(), 1, 3, 8), arrays->Copy()}));
  c.push_back(Updated(std::make_shared<BatchKVCache>(std::vector<int32_t>{1, 0}), 2, 3, 8));
  c.push_back(Updated(std::make_shared<BatchRotatingKVCache>(8, std::vector<int32_t>{1, 0}), 2, 3, 8));
  c.push_back(std::make_shared<KVCache>());  // empty: None buffers, offset 0
  c.push_back(Updated(std::make_shared<ChunkedKVCache>(std::nullopt), 1, 2, 8));
  return c;
}

LoadPromptCacheOptions Verified() {
  LoadPromptCacheOptions o;
  o.verify = true;
  return o;
}

SavePromptCacheOptions For032() {
  SavePromptCacheOptions o;
  o.layout = PromptCacheLayout::kMlxLm032;
  return o;
}

TEST(MlxLm032Test, EveryClassRoundTripsItsFullState) {
  TempDir dir;
  const PromptCache cache = EveryClass();
  const std::string path = dir.Join("all.safetensors");
  ASSERT_OK(SavePromptCache(Env::Default(), path, cache, {{"model", "demo"}}, For032()));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path, Verified()));
  EXPECT_EQ(loaded.layout, PromptCacheLayout::kMlxLm032);
  EXPECT_EQ(loaded.user_metadata, (Metadata{{"model", "demo"}}));
  ASSERT_EQ(loaded.cache.size(), cache.size());
  for (size_t i = 0; i < cache.size(); ++i) {
    EXPECT_EQ(FullFingerprint(*loaded.cache[i]), FullFingerprint(*cache[i])) << i;
    EXPECT_EQ(StateFingerprint(*loaded.cache[i]), StateFingerprint(*cache[i])) << i;
  }
}

TEST(MlxLm032Test, BytesAreWhatSavePromptCacheWrites) {
  TempDir dir;
  const std::string path = dir.Join("a.safetensors");
  PromptCache cache = {Updated(std::make_shared<KVCache>(), 1, 3, 8),
                       Updated(std::make_shared<BatchRotatingKVCache>(8, std::vector<int32_t>{0}), 1, 2, 8),
                       std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{
                           Updated(std::make_shared<KVCache>(), 1, 1, 8)})};
  SavePromptCacheOptions o = For032();
  o.integrity = false;
  ASSERT_OK(SavePromptCache(Env::Default(), path, cache, {{"model", "m"}}, o));
  ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), path));
  const SafetensorsHeader& h = file->header();
  // A 3-token KVCache costs 256 rows, as upstream's buffer.
  EXPECT_EQ(h.FindTensor("0.0")->shape, (Shape{1, 2, 256, 8}));
  EXPECT_EQ(h.FindTensor("0.2")->dtype, DType::kI32);
  EXPECT_EQ(h.FindTensor("0.2")->shape, Shape{});
  EXPECT_EQ(h.FindTensor("1.7")->dtype, DType::kBool);  // rotated
  EXPECT_EQ(h.FindTensor("2.0.1")->dtype, DType::kI32);  // "KVCache" as code points
  EXPECT_EQ(h.FindTensor("2.0.1")->shape, (Shape{7}));
  Metadata want = {{"0.model", "m"},    {"1.0", "KVCache"}, {"1.1", "BatchRotatingKVCache"},
                   {"1.2", "CacheList"}, {"2.0", ""}};
  for (const auto& [k, v] : want) EXPECT_EQ(h.FindMetadata(k).value_or("<absent>"), v) << k;
  EXPECT_EQ(h.FindMetadata("2.1.0").value_or(""), "0.2");
  EXPECT_EQ(h.FindMetadata("2.1.1").value_or(""), "scalar");
  // The child's class name, then its offset: in tree_flatten order.
  EXPECT_EQ(h.FindMetadata("2.6.0").value_or(""), "2.0.0.2");
  EXPECT_EQ(h.FindMetadata("2.7.0").value_or(""), "2.0.1");
  EXPECT_EQ(h.FindMetadata("2.7.1").value_or(""), "string");
}

TEST(MlxLm032Test, LargeIntsAreI64) {
  TempDir dir;
  auto rot = std::make_shared<RotatingKVCache>(int64_t{1} << 40, 0);
  ASSERT_OK(testing::Update(*rot, KV(1, 1, 2, 4, 1), KV(1, 1, 2, 4, 2)));
  SavePromptCacheOptions o = For032();
  const std::string path = dir.Join("a.safetensors");
  ASSERT_OK(SavePromptCache(Env::Default(), path, {rot}, {}, o));
  ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), path));
  EXPECT_EQ(file->header().FindTensor("0.4")->dtype, DType::kI64);  // max_size
  EXPECT_EQ(file->header().FindTensor("0.2")->dtype, DType::kI32);  // offset
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path));
  EXPECT_EQ(FullFingerprint(*loaded.cache[0]), FullFingerprint(*rot));
}

TEST(MlxLm032Test, DigestsAndCompressionWorkInItsUserNamespace) {
  TempDir dir;
  const PromptCache cache = EveryClass();
  for (DigestAlgorithm alg : {DigestAlgorithm::kSha256, DigestAlgorithm::kXxh3_128}) {
    SavePromptCacheOptions o = For032();
    o.digest = alg;
    o.compression_level = 3;
    const std::string path = dir.Join("c.safetensors");
    ASSERT_OK(SavePromptCache(Env::Default(), path, cache, {{"model", "demo"}}, o));
    ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), path));
    EXPECT_TRUE(info.has_digests);
    EXPECT_EQ(info.layout, PromptCacheLayout::kMlxLm032);
    EXPECT_EQ(info.user_metadata, (Metadata{{"model", "demo"}}));
    EXPECT_TRUE(info.header.FindMetadata("0.kvstore_format").has_value());
    EXPECT_FALSE(info.header.FindMetadata("1.kvstore_format").has_value());
    ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(Env::Default(), path));
    EXPECT_TRUE(report.ok());
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path, Verified()));
    for (size_t i = 0; i < cache.size(); ++i) EXPECT_EQ(FullFingerprint(*loaded.cache[i]), FullFingerprint(*cache[i]));
  }
  // A changed scalar byte is caught.
  const std::string plain = dir.Join("p.safetensors");
  ASSERT_OK(SavePromptCache(Env::Default(), plain, {cache[0]}, {}, For032()));
  std::vector<std::byte> bytes = testing::ReadFileBytes(plain);
  ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), plain));
  const TensorInfo* offset = file->header().FindTensor("0.2");
  bytes[file->header().data_offset() + offset->begin] ^= std::byte{1};
  ASSERT_OK(WriteFileAtomic(Env::Default(), plain, [&](WritableFile& f) { return f.Append(bytes); }));
  ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(Env::Default(), plain));
  ASSERT_EQ(report.mismatches.size(), 1u);
  EXPECT_EQ(report.mismatches[0].tensor, "0.2");
}

// Old layout -> 0.32 -> old: the same caches and tokens; 0.32 -> old keeps
// what the old layout stores (offset rows).
TEST(MlxLm032Test, ConvertsBothWaysWithTheSameContent) {
  TempDir dir;
  for (const std::string& fixture : testing::MlxLmFixtures()) {
    SCOPED_TRACE(fixture);
    const std::string to = dir.Join("to032.safetensors"), back = dir.Join("back.safetensors");
    ConvertOptions o;
    o.output = For032();
    ASSERT_OK(ConvertPromptCacheFile(Env::Default(), fixture, to, o));
    ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), to));
    EXPECT_EQ(info.layout, PromptCacheLayout::kMlxLm032);
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache original, LoadPromptCache(Env::Default(), fixture));
    ASSERT_OK_AND_ASSIGN(PromptCacheInfo original_info, ReadPromptCacheInfo(Env::Default(), fixture));
    o.output = SameFormatAs(original_info);
    ASSERT_OK(ConvertPromptCacheFile(Env::Default(), to, back, o));
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache converted, LoadPromptCache(Env::Default(), to));
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache returned, LoadPromptCache(Env::Default(), back));
    EXPECT_EQ(converted.user_metadata, original.user_metadata);
    ASSERT_EQ(converted.cache.size(), original.cache.size());
    for (size_t i = 0; i < original.cache.size(); ++i) {
      EXPECT_EQ(StateFingerprint(*returned.cache[i]), StateFingerprint(*original.cache[i])) << i;
      const auto* chunked = dynamic_cast<const ChunkedKVCache*>(original.cache[i].get());
      if (chunked != nullptr && chunked->start_position() > *chunked->offset()) {
        // The older restore's offset (= rows) becomes the one the rows end at.
        EXPECT_EQ(converted.cache[i]->offset(), chunked->start_position() + *chunked->offset());
        continue;
      }
      EXPECT_EQ(StateFingerprint(*converted.cache[i]), StateFingerprint(*original.cache[i])) << i;
    }
  }
}

TEST(MlxLm032Test, ConversionsAndTrimsKeepTheLayout) {
  TempDir dir;
  const std::string in = dir.Join("in.safetensors"), out = dir.Join("out.safetensors");
  ASSERT_OK(SavePromptCache(Env::Default(), in, {Updated(std::make_shared<KVCache>(), 1, 6, 8)}, {}, For032()));
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), in));
  ConvertOptions o;
  o.output = SameFormatAs(info);
  ASSERT_OK_AND_ASSIGN(int64_t trimmed, TrimPromptCacheFile(Env::Default(), in, out, 2, o));
  EXPECT_EQ(trimmed, 2);
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), out));
  EXPECT_EQ(loaded.layout, PromptCacheLayout::kMlxLm032);
  EXPECT_EQ(loaded.cache[0]->offset(), 4);
}

// ---- What the loaders would load as [] ----

TEST(MlxLm032Test, NoFileLoadsEmptyInTheOtherVersion) {
  TempDir dir;
  const PromptCache one = {Updated(std::make_shared<KVCache>(), 1, 2, 8)};
  for (PromptCacheLayout layout : {PromptCacheLayout::kMlxLm031, PromptCacheLayout::kMlxLm032}) {
    SavePromptCacheOptions o;
    o.layout = layout;
    o.integrity = false;
    const std::string path = dir.Join("one.safetensors");
    ASSERT_OK(SavePromptCache(Env::Default(), path, one, {}, o));
    ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), path));
    // Without a user entry, the other version's loader returns [].
    EXPECT_TRUE(file->header().FindMetadata(std::string(layout == PromptCacheLayout::kMlxLm032 ? "0." : "1.") + "kvstore_format").has_value())
        << LayoutName(layout);
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(Env::Default(), path));
    EXPECT_TRUE(loaded.user_metadata.empty());
  }
  // With user metadata nothing is added.
  SavePromptCacheOptions o = For032();
  o.integrity = false;
  ASSERT_OK(SavePromptCache(Env::Default(), dir.Join("m.safetensors"), one, {{"a", "b"}}, o));
  ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(Env::Default(), dir.Join("m.safetensors")));
  EXPECT_FALSE(file->header().FindMetadata("0.kvstore_format").has_value());
}

TEST(MlxLm032Test, LayersItsLoaderWouldDropAreRefused) {
  TempDir dir;
  const PromptCache cache = {Updated(std::make_shared<KVCache>(), 1, 2, 8),
                             std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{})};
  EXPECT_THAT(SavePromptCache(Env::Default(), dir.Join("a.safetensors"), cache, {}, For032()),
              HasCode(StatusCode::kInvalidArgument, "layer 1 (CacheList) has no tensor"));
  EXPECT_THAT(SavePromptCache(Env::Default(), dir.Join("a.safetensors"), {std::make_shared<ConcatenateKVCache>()}, {},
                              For032()),
              HasCode(StatusCode::kInvalidArgument, "mlx-lm 0.32 cannot load an empty one"));
}

// ---- Hostile files: each rule its own error ----

struct Raw {
  std::vector<NamedArray> tensors;
  Metadata metadata;
};

Array I32Scalar(int32_t v) { return Array::FromValues<int32_t>(DType::kI32, {}, std::span<const int32_t>(&v, 1)); }

// One KVCache layer of 2 tokens as 0.32 writes it.
Raw OneKVCache() {
  return Raw{{{"0.0", KV(1, 1, 2, 4, 1)}, {"0.1", KV(1, 1, 2, 4, 2)}, {"0.2", I32Scalar(2)}},
             {{"1.0", "KVCache"}, {"2.0", ""}, {"2.1.0", "0.2"}, {"2.1.1", "scalar"}}};
}

Status OpenRaw(const Raw& raw) {
  TempDir dir;
  const std::string path = dir.Join("h.safetensors");
  KV_RETURN_IF_ERROR(WriteFileAtomic(Env::Default(), path,
                                     [&](WritableFile& f) { return WriteSafetensors(f, raw.tensors, raw.metadata); }));
  return LoadPromptCache(Env::Default(), path).status();
}

void Set(Metadata& m, const std::string& key, const std::string& value) {
  for (auto& [k, v] : m) {
    if (k == key) {
      v = value;
      return;
    }
  }
  m.emplace_back(key, value);
}

TEST(MlxLm032HostileTest, TheBaseFileLoads) { EXPECT_OK(OpenRaw(OneKVCache())); }

TEST(MlxLm032HostileTest, ScalarEntryNamingAMissingTensor) {
  Raw r = OneKVCache();
  Set(r.metadata, "2.1.0", "0.9");
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "names tensor '0.9', which the file lacks"));
}

TEST(MlxLm032HostileTest, UnknownKindIsNotSupported) {
  Raw r = OneKVCache();
  Set(r.metadata, "2.1.1", "float");
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kNotSupported, "has the kind \"float\""));
}

TEST(MlxLm032HostileTest, ScalarThatIsNot0d) {
  Raw r = OneKVCache();
  r.tensors[2].array = Array::FromInt32s({2});
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "a scalar is 0-d"));
}

TEST(MlxLm032HostileTest, StringThatIsNotCodePoints) {
  Raw r = OneKVCache();
  Set(r.metadata, "2.1.1", "string");
  r.tensors[2].array = RandomArray(DType::kF32, {3}, 1);
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "not a 1-D array of integer code points"));
  r.tensors[2].array = Array::FromInt32s({75, 0x110000});
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "1114112, which is not a Unicode scalar value"));
  r.tensors[2].array = Array::FromInt32s({75, 0xD800});
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "not a Unicode scalar value"));
}

TEST(MlxLm032HostileTest, NoneWithElements) {
  Raw r = OneKVCache();
  Set(r.metadata, "2.1.1", "none");
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "None is empty"));
}

TEST(MlxLm032HostileTest, ScalarListEntryThatIsNotAPair) {
  Raw r = OneKVCache();
  r.metadata.emplace_back("2.2", "0.1");
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "scalar entry 2.2 is not a [tensor name, kind] pair"));
  Raw twice = OneKVCache();
  twice.metadata.emplace_back("2.2.0", "0.2");
  twice.metadata.emplace_back("2.2.1", "scalar");
  EXPECT_THAT(OpenRaw(twice), HasCode(StatusCode::kCorruption, "listed twice"));
}

TEST(MlxLm032HostileTest, LayerCountAndClassListDisagree) {
  Raw r = OneKVCache();
  r.tensors.push_back({"1.0", KV(1, 1, 2, 4, 3)});
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kCorruption, "tensors for 2 layers but 1 class names"));
  Raw gap = OneKVCache();
  gap.metadata.emplace_back("1.2", "KVCache");
  EXPECT_THAT(OpenRaw(gap), HasCode(StatusCode::kCorruption, "class name of layer 1 (1.1) is missing"));
  // A class name without tensors: the class refuses the empty state.
  Raw extra = OneKVCache();
  extra.metadata.emplace_back("1.1", "KVCache");
  EXPECT_THAT(OpenRaw(extra), HasCode(StatusCode::kCorruption, "layer 1 (KVCache)"));
}

TEST(MlxLm032HostileTest, StatesTheClassRefuses) {
  Raw beyond = OneKVCache();
  beyond.tensors[2].array = I32Scalar(3);
  EXPECT_THAT(OpenRaw(beyond), HasCode(StatusCode::kCorruption, "KVCache: offset 3 outside the 2 buffered rows"));
  Raw boolean = OneKVCache();
  const uint8_t t = 1;
  boolean.tensors[2].array = Array::FromValues<uint8_t>(DType::kBool, {}, std::span<const uint8_t>(&t, 1));
  EXPECT_THAT(OpenRaw(boolean), HasCode(StatusCode::kCorruption, "offset must be an int, got True"));
  Raw unknown = OneKVCache();
  Set(unknown.metadata, "1.0", "FancyCache");
  EXPECT_THAT(OpenRaw(unknown), HasCode(StatusCode::kNotSupported, "FancyCache"));
}

TEST(MlxLm032HostileTest, UnknownLayoutIsNotSupportedNotCorrupt) {
  Raw r = OneKVCache();
  r.metadata.emplace_back("3.0", "x");
  EXPECT_THAT(OpenRaw(r), HasCode(StatusCode::kNotSupported, "metadata key \"3.0\" is outside mlx-lm 0.32's"));
}

}  // namespace
}  // namespace kvstore
