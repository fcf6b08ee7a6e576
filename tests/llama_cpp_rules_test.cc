// The rules of the conversions on synthetic caches: the channel mapping
// element by element, the positions rules, shapes that disagree with the
// model, what mlx-lm caches are refused, F16's range, and atomic outputs.
#include <cmath>

#include "kvstore/kv_cache.h"
#include "kvstore/llama_cpp.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "llama_cpp_testutil.h"
#include "testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;

constexpr int kLayers = 2, kHeads = 2, kDim = 4;

LlamaModelInfo TinyModel(std::string_view type) {
  const std::string config = R"({"model_type": ")" + std::string(type) +
                             R"(", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4})";
  return ParseHfConfig(config).value();
}

// A one-stream F32 state whose element e of cell i, layer l is l*10000 + i*100 + e
// (plus 50 for V), with the given cell positions.
struct Synthetic {
  LlamaState state;
  std::vector<float> block;

  explicit Synthetic(std::vector<int32_t> positions, bool v_trans = false) {
    const size_t n = positions.size();
    state.tokens.assign(n, 7);
    state.streams.resize(1);
    LlamaStateStream& s = state.streams[0];
    s.positions = std::move(positions);
    s.seq_ids.assign(n, 0);
    s.v_trans = v_trans;
    s.layers.assign(kLayers, LlamaStateLayer{.k_type = GgmlType::kF32, .v_type = GgmlType::kF32,
                                             .n_embd_k = kHeads * kDim, .n_embd_v = kHeads * kDim});
  }
  static float Value(size_t l, size_t cell, size_t e, bool value) {
    return static_cast<float>(l * 10000 + cell * 100 + e + (value ? 50 : 0));
  }
  Status Save(Env* env, const std::string& path) {
    return SaveLlamaState(env, path, state, [&](size_t s, size_t l, bool value) {
      const LlamaStateStream& st = state.streams[s];
      const size_t n = st.cell_count(), w = kHeads * kDim;
      block.resize(n * w);
      for (size_t i = 0; i < n; ++i) {
        for (size_t e = 0; e < w; ++e) block[value && st.v_trans ? e * n + i : i * w + e] = Value(l, i, e, value);
      }
      return Result<std::span<const std::byte>>(std::as_bytes(std::span<const float>(block)));
    });
  }
};

TEST(LlamaMapping, KeysFollowTheTableValuesNever) {
  for (std::string_view arch : {"llama", "qwen2"}) {
    for (bool v_trans : {false, true}) {
      SCOPED_TRACE(std::string(arch) + (v_trans ? " v_trans" : ""));
      auto env = NewMemEnv();
      Synthetic syn({2, 0, 1}, v_trans);  // cells out of position order
      ASSERT_OK(syn.Save(env.get(), "s.ggsq"));
      LlamaToPromptCacheOptions o;
      o.dtype = DType::kF32;
      ASSERT_OK(ConvertLlamaStateToPromptCache(env.get(), "s.ggsq", "m.safetensors", TinyModel(arch), o));
      ASSERT_OK_AND_ASSIGN(LoadedPromptCache mlx, LoadPromptCache(env.get(), "m.safetensors"));
      const int cell_of_position[] = {1, 2, 0};
      for (int l = 0; l < kLayers; ++l) {
        const CacheState state = *mlx.cache[l]->State();
        const Array& k = state[0].array();
        const Array& v = state[1].array();
        ASSERT_EQ(k.shape(), (Shape{1, kHeads, 3, kDim}));
        for (int h = 0; h < kHeads; ++h) {
          for (int t = 0; t < 3; ++t) {
            for (int c = 0; c < kDim; ++c) {
              // llama: mlx channel s*D/2 + i is llama channel 2i + s.
              const int lc = arch == "llama" ? (c < kDim / 2 ? 2 * c : 2 * (c - kDim / 2) + 1) : c;
              EXPECT_EQ(k.At<float>({0, h, t, c}), Synthetic::Value(l, cell_of_position[t], h * kDim + lc, false));
              EXPECT_EQ(v.At<float>({0, h, t, c}), Synthetic::Value(l, cell_of_position[t], h * kDim + c, true));
            }
          }
        }
      }
    }
  }
}

TEST(LlamaSequenceRules, PositionsMustBeZeroToTOfOneSequence) {
  auto find = [](std::vector<int32_t> positions, std::vector<int32_t> seq_ids = {}) {
    Synthetic syn(std::move(positions));
    if (!seq_ids.empty()) syn.state.streams[0].seq_ids = std::move(seq_ids);
    return FindLlamaSequence(syn.state);
  };
  ASSERT_OK_AND_ASSIGN(LlamaSequence seq, find({3, 1, 0, 2}));
  EXPECT_EQ(seq.cell_of_position, (std::vector<uint32_t>{2, 1, 3, 0}));
  EXPECT_THAT(find({3, 4, 5}), HasCode(StatusCode::kNotSupported, "stream 0 positions start at 3, not 0 (a shifted context"));
  EXPECT_THAT(find({0, 1, 3}), HasCode(StatusCode::kNotSupported, "stream 0 position 2 is missing"));
  EXPECT_THAT(find({0, 1, 1}), HasCode(StatusCode::kNotSupported, "stream 0 holds position 1 in more than one cell"));
  EXPECT_THAT(find({0, 1, 2}, {0, 0, 3}), HasCode(StatusCode::kNotSupported, "stream 0 holds several sequences (seq ids 0 and 3)"));
  Synthetic two({0, 1});
  two.state.streams.push_back(two.state.streams[0]);
  EXPECT_THAT(FindLlamaSequence(two.state), HasCode(StatusCode::kNotSupported, "2 streams hold cells"));
  LlamaState empty;
  empty.streams.resize(2);
  EXPECT_THAT(FindLlamaSequence(empty), HasCode(StatusCode::kNotSupported, "holds no cells"));
}

TEST(LlamaToMlxRules, RefusalsNameTheFileAndTheField) {
  auto env = NewMemEnv();
  Synthetic shifted({4, 5, 6});
  ASSERT_OK(shifted.Save(env.get(), "shifted.ggsq"));
  EXPECT_THAT(ConvertLlamaStateToPromptCache(env.get(), "shifted.ggsq", "o", TinyModel("llama")),
              HasCode(StatusCode::kNotSupported, "shifted.ggsq: llama.cpp state: stream 0 positions start at 4"));
  Synthetic ok({0, 1, 2});
  ASSERT_OK(ok.Save(env.get(), "s.ggsq"));
  LlamaModelInfo m = TinyModel("llama");
  m.n_layer = 3;
  EXPECT_THAT(ConvertLlamaStateToPromptCache(env.get(), "s.ggsq", "o", m),
              HasCode(StatusCode::kInvalidArgument, "n_layer 2 != the model (config.json) n_layer 3"));
  m = TinyModel("llama");
  m.n_head_kv = 1;
  EXPECT_THAT(ConvertLlamaStateToPromptCache(env.get(), "s.ggsq", "o", m),
              HasCode(StatusCode::kInvalidArgument, "layer 0 K row has 8 elements, the model (config.json) n_head_kv 1 x head_dim 4 = 4"));
  LlamaToPromptCacheOptions o;
  o.tokens = std::vector<int32_t>{1, 2};
  EXPECT_THAT(ConvertLlamaStateToPromptCache(env.get(), "s.ggsq", "o", TinyModel("llama"), o),
              HasCode(StatusCode::kInvalidArgument, "2 tokens (option) but 3 cells"));
  EXPECT_FALSE(env->FileExists("o"));
  o.tokens = std::vector<int32_t>{1, 2, 3};
  ASSERT_OK_AND_ASSIGN(LlamaConversionReport r, ConvertLlamaStateToPromptCache(env.get(), "s.ggsq", "o", TinyModel("llama"), o));
  EXPECT_EQ(r.tokens_source, "option");
  EXPECT_EQ(r.dtype, DType::kF32);  // no dtype in the config: the cache's own type
}

// An mlx-lm prompt cache in `env` with the given layers and "tokens" metadata.
Status SaveMlx(Env* env, const std::string& path, const PromptCache& cache, std::string tokens = "[1, 2, 3]") {
  Metadata md;
  if (!tokens.empty()) md.emplace_back("tokens", std::move(tokens));
  return SavePromptCache(env, path, cache, md);
}

std::shared_ptr<Cache> KV(const Array& k, const Array& v) {
  return std::shared_ptr<Cache>(CacheFromState("KVCache", CacheState{k, v}, MetaState("")).value());
}

PromptCache Layers(DType dtype, int64_t batch = 1, int64_t heads = kHeads, int64_t tokens = 3) {
  PromptCache c;
  for (int l = 0; l < kLayers; ++l) {
    c.push_back(KV(testing::RandomArray(dtype, {batch, heads, tokens, kDim}, 2 * l),
                   testing::RandomArray(dtype, {batch, heads, tokens, kDim}, 2 * l + 1)));
  }
  return c;
}

TEST(MlxToLlamaRules, UnconvertibleCachesAreRefusedByName) {
  auto env = NewMemEnv();
  const LlamaModelInfo m = TinyModel("llama");
  auto convert = [&](const PromptCache& cache, const PromptCacheToLlamaOptions& o = {}) {
    EXPECT_OK(SaveMlx(env.get(), "in.safetensors", cache));
    return ConvertPromptCacheToLlamaState(env.get(), "in.safetensors", "out.ggsq", m, o);
  };
  PromptCache q = Layers(DType::kF16);
  KVCache wide;  // quantization groups need 32 channels
  ASSERT_OK(wide.UpdateAndFetch(testing::RandomArray(DType::kF16, {1, kHeads, 3, 32}, 1),
                                testing::RandomArray(DType::kF16, {1, kHeads, 3, 32}, 2)).status());
  ASSERT_OK_AND_ASSIGN(auto quantized, wide.ToQuantized(32, 4));
  q[1] = std::shared_ptr<Cache>(std::move(quantized));
  EXPECT_THAT(convert(q), HasCode(StatusCode::kNotSupported, "layer 1: quantized caches are not supported"));
  PromptCache rot = Layers(DType::kF16);
  auto rotating = std::make_shared<RotatingKVCache>(16, 4);
  ASSERT_OK(rotating->UpdateAndFetch(testing::RandomArray(DType::kF16, {1, kHeads, 3, kDim}, 1),
                                     testing::RandomArray(DType::kF16, {1, kHeads, 3, kDim}, 2)).status());
  rot[0] = rotating;
  EXPECT_THAT(convert(rot), HasCode(StatusCode::kNotSupported, "layer 0: sliding-window caches are not supported"));
  EXPECT_THAT(convert(Layers(DType::kF16, 2)), HasCode(StatusCode::kNotSupported, "layer 0 keys batch 2"));
  EXPECT_THAT(convert(Layers(DType::kF16, 1, 3)),
              HasCode(StatusCode::kInvalidArgument, "layer 0 keys n_head_kv 3 != the model (config.json) n_head_kv 2"));
  PromptCache three = Layers(DType::kF16);
  three.push_back(three[0]);
  EXPECT_THAT(convert(three), HasCode(StatusCode::kInvalidArgument, "3 layers != the model (config.json) n_layer 2"));
  PromptCache uneven = Layers(DType::kF16);
  uneven[1] = Layers(DType::kF16, 1, kHeads, 4)[1];
  EXPECT_THAT(convert(uneven), HasCode(StatusCode::kInvalidArgument, "layer 1 holds 4 tokens, layer 0 3"));
  PromptCacheToLlamaOptions o;
  o.n_stream = 2;
  o.stream = 2;
  EXPECT_THAT(convert(Layers(DType::kF16), o), HasCode(StatusCode::kInvalidArgument, "stream 2 is not below n_stream 2"));
  EXPECT_FALSE(env->FileExists("out.ggsq"));
}

TEST(MlxToLlamaRules, TokensComeFromOptionsOrMetadataAndMustMatch) {
  auto env = NewMemEnv();
  const LlamaModelInfo m = TinyModel("qwen3");
  ASSERT_OK(SaveMlx(env.get(), "none.safetensors", Layers(DType::kF16), ""));
  EXPECT_THAT(ConvertPromptCacheToLlamaState(env.get(), "none.safetensors", "o", m),
              HasCode(StatusCode::kInvalidArgument, "no token ids: the file has no \"tokens\" metadata"));
  ASSERT_OK(SaveMlx(env.get(), "bad.safetensors", Layers(DType::kF16), "[1, \"x\"]"));
  EXPECT_THAT(ConvertPromptCacheToLlamaState(env.get(), "bad.safetensors", "o", m),
              HasCode(StatusCode::kInvalidArgument, "metadata: tokens: entry 1 (\"x\") is not a token id"));
  ASSERT_OK(SaveMlx(env.get(), "two.safetensors", Layers(DType::kF16), "[1, 2]"));
  EXPECT_THAT(ConvertPromptCacheToLlamaState(env.get(), "two.safetensors", "o", m),
              HasCode(StatusCode::kInvalidArgument, "2 tokens (metadata) but the cache holds 3"));
  PromptCacheToLlamaOptions o;
  o.tokens = std::vector<int32_t>{4, 5, 6};
  ASSERT_OK_AND_ASSIGN(LlamaConversionReport r, ConvertPromptCacheToLlamaState(env.get(), "two.safetensors", "o", m, o));
  EXPECT_EQ(r.tokens_source, "option");
  ASSERT_OK_AND_ASSIGN(auto file, env->OpenReadable("o"));
  ASSERT_OK_AND_ASSIGN(LlamaState st, ParseLlamaState(file->data()));
  EXPECT_EQ(st.tokens, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_THAT(ParseTokenList("{}"), HasCode(StatusCode::kInvalidArgument, "not a JSON list"));
  EXPECT_THAT(ParseTokenList("[-1]"), HasCode(StatusCode::kInvalidArgument, "entry 0 (-1)"));
  EXPECT_THAT(ParseTokenList("[1,"), HasCode(StatusCode::kInvalidArgument, "tokens:"));
}

TEST(MlxToLlamaRules, ValuesOutsideF16AreRefusedWithAHint) {
  auto env = NewMemEnv();
  PromptCache c = Layers(DType::kF32);
  std::vector<float> big(kHeads * 3 * kDim, 1.0f);
  big[5] = 70000.0f;
  c[1] = KV(testing::RandomArray(DType::kF32, {1, kHeads, 3, kDim}, 9), Array::FromValues<float>(DType::kF32, {1, kHeads, 3, kDim}, big));
  ASSERT_OK(SaveMlx(env.get(), "big.safetensors", c));
  EXPECT_THAT(ConvertPromptCacheToLlamaState(env.get(), "big.safetensors", "o", TinyModel("llama")),
              HasCode(StatusCode::kInvalidArgument, "layer 1 values holds 70000.000000, outside F16's range: use --kv-type bf16"));
  big[5] = 65519.0f;  // rounds to F16's largest finite value
  c[1] = KV(testing::RandomArray(DType::kF32, {1, kHeads, 3, kDim}, 9), Array::FromValues<float>(DType::kF32, {1, kHeads, 3, kDim}, big));
  ASSERT_OK(SaveMlx(env.get(), "edge.safetensors", c));
  EXPECT_OK(ConvertPromptCacheToLlamaState(env.get(), "edge.safetensors", "o", TinyModel("llama")));
  PromptCacheToLlamaOptions o;
  o.k_type = o.v_type = GgmlType::kBF16;
  EXPECT_OK(ConvertPromptCacheToLlamaState(env.get(), "big.safetensors", "o", TinyModel("llama"), o));
}

TEST(MlxToLlamaRules, SettingsTravelInTheMetadataAndFlagsWin) {
  auto env = NewMemEnv();
  Synthetic syn({0, 1, 2}, true);
  syn.state.streams.insert(syn.state.streams.begin(), LlamaStateStream{});  // slot 1 of a -np 2 server
  syn.state.streams[1].seq_ids.assign(3, 1);
  ASSERT_OK(syn.Save(env.get(), "slot.ggsq"));
  ASSERT_OK(ConvertLlamaStateToPromptCache(env.get(), "slot.ggsq", "m.safetensors", TinyModel("llama")));
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env.get(), "m.safetensors"));
  std::string settings;
  for (const auto& [k, v] : info.user_metadata) {
    if (k == "llama_cpp") settings = v;
  }
  EXPECT_EQ(settings, R"({"k_type":"f32","v_type":"f32","flash_attn":false,"n_stream":2,"stream":1,"seq_id":1})");
  ASSERT_OK_AND_ASSIGN(LlamaConversionReport r, ConvertPromptCacheToLlamaState(env.get(), "m.safetensors", "b.ggsq", TinyModel("llama")));
  EXPECT_EQ(r.target.n_stream, 2u);
  EXPECT_EQ(r.target.seq_id, 1);
  PromptCacheToLlamaOptions o;
  o.n_stream = 1;
  o.flash_attn = true;
  o.k_type = GgmlType::kF16;
  ASSERT_OK_AND_ASSIGN(r, ConvertPromptCacheToLlamaState(env.get(), "m.safetensors", "b.ggsq", TinyModel("llama"), o));
  EXPECT_EQ(r.target.n_stream, 1u);
  EXPECT_EQ(r.target.stream, 0u);  // the recorded stream 1 does not fit one stream: an explicit n_stream resets it
  ASSERT_OK_AND_ASSIGN(auto file, env->OpenReadable("b.ggsq"));
  ASSERT_OK_AND_ASSIGN(LlamaState st, ParseLlamaState(file->data()));
  EXPECT_FALSE(st.streams[0].v_trans);
  EXPECT_EQ(st.streams[0].layers[0].k_type, GgmlType::kF16);
  EXPECT_EQ(st.streams[0].layers[0].v_type, GgmlType::kF32);
}

TEST(PromptCacheReaders, NameALlamaCppFileInsteadOfFailingSafetensorsChecks) {
  const std::string path = testing::FixturePath("llama.cpp/llama_f32_d16/seq_fa1.ggsq");
  EXPECT_THAT(LoadPromptCache(Env::Default(), path),
              HasCode(StatusCode::kNotSupported, path + ": not a safetensors file: it looks like a llama.cpp "
                                                        "sequence-state (slot) file; `kvtool inspect " + path));
  EXPECT_THAT(ReadPromptCacheInfo(Env::Default(), path), HasCode(StatusCode::kNotSupported, "llama.cpp"));
}

}  // namespace
}  // namespace kvstore
