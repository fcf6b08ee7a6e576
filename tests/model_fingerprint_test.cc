#include "kvstore/model_fingerprint.h"

#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;
using testing::Prefill;

CacheSpec Attention(std::string cls, DType dtype = DType::kF16) {
  return CacheSpec{.class_name = std::move(cls), .dtype = dtype, .kv_heads = 2, .k_head_dim = 32, .v_head_dim = 32};
}

PromptCache EveryClass() {
  auto kv = std::make_shared<KVCache>();
  auto q = std::make_shared<QuantizedKVCache>(32, 4);
  auto rot = std::make_shared<RotatingKVCache>(64, 4);
  auto chunked = std::make_shared<ChunkedKVCache>(128);
  for (Cache* c : std::initializer_list<Cache*>{kv.get(), q.get(), rot.get(), chunked.get()}) Prefill(*c, 5, 5, 1);
  auto arrays = std::make_shared<ArraysCache>(2);
  EXPECT_OK(arrays->SetSlot(0, testing::RandomArray(DType::kBF16, {1, 3, 16}, 1)));
  EXPECT_OK(arrays->SetSlot(1, testing::RandomArray(DType::kF32, {1, 2, 8, 4}, 2)));
  auto list = std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{arrays, kv});
  return {kv, q, rot, chunked, list};
}

TEST(ModelFingerprintTest, DerivedFromACacheEqualsTheDeclaredSpec) {
  ASSERT_OK_AND_ASSIGN(ModelFingerprint derived, ModelFingerprint::Of("llama", EveryClass()));
  CacheSpec q = Attention("QuantizedKVCache");
  q.group_size = 32;
  q.bits = 4;
  CacheSpec rot = Attention("RotatingKVCache");
  rot.max_size = 64;
  rot.keep = 4;
  CacheSpec chunked = Attention("ChunkedKVCache");
  chunked.chunk_size = 128;
  CacheSpec arrays{.class_name = "ArraysCache",
                   .slots = {SlotSpec{DType::kBF16, {3, 16}}, SlotSpec{DType::kF32, {2, 8, 4}}}};
  CacheSpec list{.class_name = "CacheList", .children = {arrays, Attention("KVCache")}};
  ASSERT_OK_AND_ASSIGN(ModelFingerprint declared,
                       ModelFingerprint::Make({.model_id = "llama", .layers = {Attention("KVCache"), q, rot, chunked, list}}));
  EXPECT_EQ(derived.json(), declared.json());
  EXPECT_EQ(derived.digest(), declared.digest());
  EXPECT_EQ(derived.DifferenceFrom(declared), "");
  EXPECT_OK(declared.Check(EveryClass()));
  // The canonical JSON parses back to the same fingerprint.
  ASSERT_OK_AND_ASSIGN(ModelFingerprint parsed, ModelFingerprint::FromJson(declared.json()));
  EXPECT_EQ(parsed.json(), declared.json());
  EXPECT_EQ(declared.json().substr(0, 86),
            "{\"format\":\"kvstore-fingerprint/1\",\"layers\":[{\"class\":\"KVCache\",\"dtype\":\"F16\",\"heads\":2");
}

// The canonical JSON and digest of a model with every class, as written
// into store entries and shared-tier namespaces (docs/format.md §8.1): a
// change here orphans every stored entry.
TEST(ModelFingerprintTest, CanonicalFormIsPinned) {
  auto with = [](CacheSpec spec, auto&& set) {
    set(spec);
    return spec;
  };
  CacheSpec q = with(Attention("QuantizedKVCache", DType::kBF16), [](CacheSpec& s) { s.group_size = 32, s.bits = 8; });
  CacheSpec rot = with(Attention("RotatingKVCache"), [](CacheSpec& s) { s.max_size = 256, s.keep = 4; });
  CacheSpec brot = with(Attention("BatchRotatingKVCache"), [](CacheSpec& s) { s.max_size = 128; });
  CacheSpec chunked = with(Attention("ChunkedKVCache", DType::kF32), [](CacheSpec& s) { s.chunk_size = 512; });
  CacheSpec mamba{.class_name = "MambaCache",
                  .slots = {SlotSpec{DType::kF16, {3, 64}}, SlotSpec{DType::kF32, {4, 16, 8}}}};
  CacheSpec arrays{.class_name = "ArraysCache", .slots = {SlotSpec{DType::kBF16, {7}}}};
  CacheSpec list{.class_name = "CacheList", .children = {arrays, Attention("KVCache"), rot}};
  ASSERT_OK_AND_ASSIGN(
      ModelFingerprint fp,
      ModelFingerprint::Make({.model_id = "pinned@1",
                              .layers = {Attention("KVCache"), Attention("ConcatenateKVCache"), q, rot, chunked,
                                         Attention("BatchKVCache"), brot, mamba, list}}));
  EXPECT_EQ(fp.json(),
            "{\"format\":\"kvstore-fingerprint/1\",\"layers\":[{\"class\":\"KVCache\",\"dtype\":\"F16\",\"hea"
            "ds\":2,\"k_dim\":32,\"v_dim\":32},{\"class\":\"ConcatenateKVCache\",\"dtype\":\"F16\",\"heads\":"
            "2,\"k_dim\":32,\"v_dim\":32},{\"bits\":8,\"class\":\"QuantizedKVCache\",\"dtype\":\"BF16\",\"gro"
            "up_size\":32,\"heads\":2,\"k_dim\":32,\"v_dim\":32},{\"class\":\"RotatingKVCache\",\"dtype\":\"F"
            "16\",\"heads\":2,\"k_dim\":32,\"keep\":4,\"max_size\":256,\"v_dim\":32},{\"chunk_size\":512,\"cl"
            "ass\":\"ChunkedKVCache\",\"dtype\":\"F32\",\"heads\":2,\"k_dim\":32,\"v_dim\":32},{\"class\":\"B"
            "atchKVCache\",\"dtype\":\"F16\",\"heads\":2,\"k_dim\":32,\"v_dim\":32},{\"class\":\"BatchRotatin"
            "gKVCache\",\"dtype\":\"F16\",\"heads\":2,\"k_dim\":32,\"max_size\":128,\"v_dim\":32},{\"class\":"
            "\"MambaCache\",\"slots\":[{\"dtype\":\"F16\",\"shape\":[3,64]},{\"dtype\":\"F32\",\"shape\":[4,1"
            "6,8]}]},{\"children\":[{\"class\":\"ArraysCache\",\"slots\":[{\"dtype\":\"BF16\",\"shape\":[7]}]"
            "},{\"class\":\"KVCache\",\"dtype\":\"F16\",\"heads\":2,\"k_dim\":32,\"v_dim\":32},{\"class\":\"R"
            "otatingKVCache\",\"dtype\":\"F16\",\"heads\":2,\"k_dim\":32,\"keep\":4,\"max_size\":256,\"v_dim\""
            ":32}],\"class\":\"CacheList\"}],\"model\":\"pinned@1\"}");
  EXPECT_EQ(fp.digest().ToHex(), "2d9d3e61ea940b3c79113e8d48936ae5045e082095d4dde448cf05c186afcaaf");
  ASSERT_OK_AND_ASSIGN(ModelFingerprint parsed, ModelFingerprint::FromJson(fp.json()));
  EXPECT_EQ(parsed.digest(), fp.digest());
}

TEST(ModelFingerprintTest, TheFirstDifferenceIsNamed) {
  ASSERT_OK_AND_ASSIGN(ModelFingerprint a, ModelFingerprint::Of("m", EveryClass()));
  ModelSpec spec = a.spec();
  auto differs = [&](ModelSpec changed) {
    Result<ModelFingerprint> b = ModelFingerprint::Make(std::move(changed));
    EXPECT_OK(b);
    EXPECT_NE(a.digest(), b->digest());
    return a.DifferenceFrom(*b);
  };
  ModelSpec s = spec;
  s.model_id = "n";
  EXPECT_EQ(differs(s), "model 'm' != 'n'");
  s = spec;
  s.layers.pop_back();
  EXPECT_EQ(differs(s), "5 layers != 4");
  s = spec;
  s.layers[2].max_size = 32;
  EXPECT_EQ(differs(s), "layer 2 (RotatingKVCache): max_size 64 != 32");
  s = spec;
  s.layers[1].bits = 8;
  EXPECT_EQ(differs(s), "layer 1 (QuantizedKVCache): bits 4 != 8");
  s = spec;
  s.layers[0].dtype = DType::kBF16;
  EXPECT_EQ(differs(s), "layer 0 (KVCache): dtype F16 != BF16");
  s = spec;
  s.layers[4].children[1].k_head_dim = 64;
  EXPECT_EQ(differs(s), "layer 4.1 (KVCache): k_head_dim 32 != 64");
  s = spec;
  s.layers[4].children[0].slots[1].shape = {2, 8, 8};
  EXPECT_EQ(differs(s), "layer 4.0 (ArraysCache): slot 1 F32[2, 8, 4] != F32[2, 8, 8]");
  s = spec;
  s.layers[3] = Attention("KVCache");
  EXPECT_EQ(differs(s), "layer 3: class ChunkedKVCache != KVCache");
  EXPECT_THAT(ModelFingerprint::Make(s)->Check(EveryClass()),
              HasCode(StatusCode::kInvalidArgument, "cache does not match the model: layer 3: class"));
}

TEST(ModelFingerprintTest, SpecsAreValidated) {
  auto refused = [](ModelSpec spec, std::string_view why) {
    EXPECT_THAT(ModelFingerprint::Make(std::move(spec)), HasCode(StatusCode::kInvalidArgument, why));
  };
  refused({.model_id = "", .layers = {Attention("KVCache")}}, "empty model id");
  refused({.model_id = "m"}, "no layers");
  refused({.model_id = "m", .layers = {CacheSpec{.class_name = "Nope"}}}, "layer 0: unknown class 'Nope'");
  CacheSpec no_heads = Attention("KVCache");
  no_heads.kv_heads = 0;
  refused({.model_id = "m", .layers = {no_heads}}, "kv_heads");
  CacheSpec q = Attention("QuantizedKVCache");
  q.bits = 7;
  q.group_size = 32;
  refused({.model_id = "m", .layers = {q}}, "supported bits");
  CacheSpec rot = Attention("RotatingKVCache");
  rot.max_size = 4;
  rot.keep = 5;
  refused({.model_id = "m", .layers = {rot}}, "0 <= keep <= max_size");
  CacheSpec deep = Attention("KVCache");
  for (int i = 0; i < 10; ++i) deep = CacheSpec{.class_name = "CacheList", .children = {deep}};
  refused({.model_id = "m", .layers = {deep}}, "nesting");
  refused({.model_id = "m", .layers = {CacheSpec{.class_name = "MambaCache"}}}, "2 slots");
}

TEST(ModelFingerprintTest, CachesWithoutShapesHaveNoFingerprint) {
  EXPECT_THAT(ModelFingerprint::Of("m", {std::make_shared<KVCache>()}),
              HasCode(StatusCode::kNotSupported, "layer 0: KVCache has no state"));
  EXPECT_THAT(ModelFingerprint::Of("m", {std::make_shared<ArraysCache>(2)}),
              HasCode(StatusCode::kNotSupported, "slot 0 is None"));
}

TEST(ModelFingerprintTest, HostileJsonIsRefused) {
  ASSERT_OK_AND_ASSIGN(ModelFingerprint fp, ModelFingerprint::Of("m", EveryClass()));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "model fingerprint"},
      {"[]", "root: not an object"},
      {R"({"format":"kvstore-fingerprint/2","model":"m","layers":[]})", "unknown format"},
      {R"({"format":"kvstore-fingerprint/1","model":"m","layers":[{"class":"KVCache"}]})", "'dtype'"},
      {R"({"format":"kvstore-fingerprint/1","model":"m","layers":[{"class":"KVCache","dtype":"Q7","heads":1,"k_dim":1,"v_dim":1}]})",
       "unknown dtype"},
      {R"({"format":"kvstore-fingerprint/1","model":"m","layers":[{"class":"KVCache","dtype":"F16","heads":-1,"k_dim":1,"v_dim":1}]})",
       "kv_heads"},
      {R"({"format":"kvstore-fingerprint/1","model":"m","layers":[{"class":"KVCache","dtype":"F16","heads":1e3,"k_dim":1,"v_dim":1}]})",
       "'heads' is not an integer"},
      {R"({"format":"kvstore-fingerprint/1","model":"m","layers":[{"class":"ArraysCache","slots":[{"dtype":"F32","shape":[-1]}]}]})",
       "bad slot shape"},
      {R"({"format":"kvstore-fingerprint/1","model":"m","layers":[]})", "no layers"},
  };
  for (const auto& [json, why] : cases) {
    SCOPED_TRACE(json);
    EXPECT_THAT(ModelFingerprint::FromJson(json), HasCode(StatusCode::kCorruption, why));
  }
}

}  // namespace
}  // namespace kvstore
