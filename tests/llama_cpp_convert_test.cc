// Conversions between llama.cpp state files and mlx-lm prompt caches on the
// real engines' output: each converted cache agrees with the other engine's
// own file within expected.json's tolerances, its structure is exactly what
// the other engine writes, and round trips without a dtype change are exact.
#include <cstring>

#include "kvstore/llama_cpp.h"
#include "libkvstore/integrity/sha256.h"
#include "llama_cpp_testutil.h"
#include "testutil.h"

namespace kvstore {
namespace {

using testing::LlamaFixtureCase;
using testing::LlamaFixtureCases;
using testing::LlamaFixtureFile;

LlamaModelInfo Model(const LlamaFixtureCase& c, const std::string& which = "model/config.json") {
  auto m = ReadLlamaModel(Env::Default(), c.Path(which));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : LlamaModelInfo{};
}

double Tolerance(const LlamaFixtureFile& f, const char* key) { return f.expected.Find(key)->as_double(); }

struct LayerErrors {
  double k = 0, v = 0;
};

// max |a - b| over every layer's keys and values of two loaded prompt caches.
LayerErrors CompareCaches(const LoadedPromptCache& a, const LoadedPromptCache& b) {
  LayerErrors e;
  EXPECT_EQ(a.cache.size(), b.cache.size());
  for (size_t l = 0; l < a.cache.size() && l < b.cache.size(); ++l) {
    auto sa = a.cache[l]->State(), sb = b.cache[l]->State();
    EXPECT_TRUE(sa.ok() && sb.ok());
    if (!sa.ok() || !sb.ok()) continue;
    EXPECT_EQ((*sa)[0].array().shape(), (*sb)[0].array().shape());
    EXPECT_EQ((*sa)[0].array().dtype(), (*sb)[0].array().dtype());
    e.k = std::max(e.k, testing::MaxAbsDiff(testing::ArrayFloats((*sa)[0].array()), testing::ArrayFloats((*sb)[0].array())));
    e.v = std::max(e.v, testing::MaxAbsDiff(testing::ArrayFloats((*sa)[1].array()), testing::ArrayFloats((*sb)[1].array())));
  }
  return e;
}

TEST(LlamaToMlx, AgreesWithMlxLmsOwnCache) {
  size_t files = 0;
  testing::TempDir dir;
  for (const auto& c : LlamaFixtureCases()) {
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache mlx, LoadPromptCache(Env::Default(), c.Path("mlx_cache.safetensors")));
    const Json& mlx_expected = *c.expected.Find("mlx_cache");
    for (const auto& f : c.files) {
      for (const char* model_file : {"model/config.json", "model/model.gguf"}) {
        SCOPED_TRACE(c.name + "/" + f.name + " with " + model_file);
        ++files;
        const std::string out = dir.Join(c.name + "_" + f.name + ".safetensors");
        ASSERT_OK_AND_ASSIGN(LlamaConversionReport r,
                             ConvertLlamaStateToPromptCache(Env::Default(), f.path, out, Model(c, model_file)));
        EXPECT_EQ(r.tokens, static_cast<size_t>(c.expected.Find("n_tokens")->as_int()));
        EXPECT_EQ(r.target.n_stream, f.expected.Find("n_stream")->as_int());
        EXPECT_EQ(r.target.stream, f.expected.Find("stream")->as_int());
        EXPECT_EQ(r.target.seq_id, f.expected.Find("seq_id")->as_int());
        EXPECT_EQ(r.target.flash_attn, f.expected.Find("flash_attn")->as_bool());
        LoadPromptCacheOptions verify;
        verify.verify = true;
        ASSERT_OK_AND_ASSIGN(LoadedPromptCache got, LoadPromptCache(Env::Default(), out, verify));
        for (const auto& layer : got.cache) {
          EXPECT_EQ(layer->class_name(), "KVCache");
          EXPECT_EQ(layer->offset(), mlx_expected.Find("offset")->as_int());
        }
        const LayerErrors e = CompareCaches(got, mlx);
        EXPECT_LE(e.k, Tolerance(f, "tolerance_k"));
        EXPECT_LE(e.v, Tolerance(f, "tolerance_v"));
        // The same token ids, spelled as mlx-lm's own file spells them.
        std::string tokens;
        for (const auto& [k, v] : got.user_metadata) {
          if (k == "tokens") tokens = v;
        }
        EXPECT_EQ(tokens, mlx_expected.Find("user_metadata")->Find("tokens")->as_string());
      }
    }
  }
  EXPECT_GT(files, 0u);
}

TEST(LlamaToMlx, TheWrongKeyOrderIsFarOutsideTheTolerance) {
  size_t files = 0;
  testing::TempDir dir;
  for (const auto& c : LlamaFixtureCases()) {
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache mlx, LoadPromptCache(Env::Default(), c.Path("mlx_cache.safetensors")));
    LlamaModelInfo wrong = Model(c);
    wrong.rope.key_order = wrong.rope.key_order == KeyChannelOrder::kSame ? KeyChannelOrder::kAdjacentPairs
                                                                          : KeyChannelOrder::kSame;
    for (const auto& f : c.files) {
      SCOPED_TRACE(f.path);
      ++files;
      const std::string out = dir.Join("wrong.safetensors");
      ASSERT_OK(ConvertLlamaStateToPromptCache(Env::Default(), f.path, out, wrong));
      ASSERT_OK_AND_ASSIGN(LoadedPromptCache got, LoadPromptCache(Env::Default(), out));
      const LayerErrors e = CompareCaches(got, mlx);
      // The negative control measured with the real engines.
      EXPECT_NEAR(e.k, f.expected.Find("k_max_abs_err_wrong_k_mapping")->as_double(), Tolerance(f, "tolerance_k"));
      EXPECT_GT(e.k, 10 * Tolerance(f, "tolerance_k"));
      EXPECT_LE(e.v, Tolerance(f, "tolerance_v"));
    }
  }
  EXPECT_GT(files, 0u);
}

TEST(MlxToLlama, StructureIsExactlyLlamaCppsAndValuesAgree) {
  size_t files = 0;
  testing::TempDir dir;
  for (const auto& c : LlamaFixtureCases()) {
    for (const auto& f : c.files) {
      SCOPED_TRACE(c.name + "/" + f.name);
      ++files;
      PromptCacheToLlamaOptions o;
      o.flash_attn = f.expected.Find("flash_attn")->as_bool();
      o.n_stream = static_cast<uint32_t>(f.expected.Find("n_stream")->as_int());
      o.stream = static_cast<uint32_t>(f.expected.Find("stream")->as_int());
      const std::string out = dir.Join(c.name + "_" + f.name);
      ASSERT_OK_AND_ASSIGN(LlamaConversionReport r,
                           ConvertPromptCacheToLlamaState(Env::Default(), c.Path("mlx_cache.safetensors"), out, Model(c), o));
      EXPECT_EQ(r.tokens_source, "metadata");
      const std::vector<std::byte> want = testing::ReadFileBytes(f.path), got = testing::ReadFileBytes(out);
      ASSERT_EQ(got.size(), want.size());
      ASSERT_OK_AND_ASSIGN(LlamaState ws, ParseLlamaState(want));
      ASSERT_OK_AND_ASSIGN(LlamaState gs, ParseLlamaState(got));
      EXPECT_EQ(gs.tokens, ws.tokens);
      ASSERT_EQ(gs.streams.size(), ws.streams.size());
      for (size_t s = 0; s < gs.streams.size(); ++s) {
        const LlamaStateStream &g = gs.streams[s], &w = ws.streams[s];
        EXPECT_EQ(g.positions, w.positions);
        EXPECT_EQ(g.seq_ids, w.seq_ids);
        EXPECT_EQ(g.v_trans, w.v_trans);
        ASSERT_EQ(g.layers.size(), w.layers.size());
        for (size_t l = 0; l < g.layers.size(); ++l) {
          EXPECT_EQ(g.layers[l].k_type, w.layers[l].k_type);
          EXPECT_EQ(g.layers[l].v_type, w.layers[l].v_type);
          EXPECT_EQ(g.layers[l].n_embd_k, w.layers[l].n_embd_k);
          EXPECT_EQ(g.layers[l].n_embd_v, w.layers[l].n_embd_v);
          EXPECT_EQ(g.layers[l].k_offset, w.layers[l].k_offset);
          EXPECT_EQ(g.layers[l].v_offset, w.layers[l].v_offset);
          EXPECT_LE(testing::MaxAbsDiff(testing::LlamaBlockFloats(got, gs, s, l, false),
                                        testing::LlamaBlockFloats(want, ws, s, l, false)),
                    Tolerance(f, "tolerance_k"));
          EXPECT_LE(testing::MaxAbsDiff(testing::LlamaBlockFloats(got, gs, s, l, true),
                                        testing::LlamaBlockFloats(want, ws, s, l, true)),
                    Tolerance(f, "tolerance_v"));
        }
      }
      // Everything before the first K data block (header, tokens, cells) is byte-identical.
      const size_t head = ws.streams[f.expected.Find("stream")->as_int()].layers[0].k_offset;
      EXPECT_EQ(std::memcmp(got.data(), want.data(), head), 0);
    }
  }
  EXPECT_GT(files, 0u);
}

TEST(RoundTrips, LlamaCppThroughMlxLmGivesIdenticalBytes) {
  size_t files = 0;
  testing::TempDir dir;
  for (const auto& c : LlamaFixtureCases()) {
    for (const auto& f : c.files) {
      // F16 -> F16 copies; F16 -> F32 -> F16 is exact too. No flag is needed on
      // the way back: the settings travel in the metadata.
      for (DType dtype : {DType::kF16, DType::kF32}) {
        SCOPED_TRACE(f.path + " via " + std::string(DTypeName(dtype)));
        ++files;
        LlamaToPromptCacheOptions to_mlx;
        to_mlx.dtype = dtype;
        to_mlx.output.compression_level = dtype == DType::kF16 ? std::optional<int>(3) : std::nullopt;
        const std::string mid = dir.Join("mid.safetensors"), back = dir.Join("back.ggsq");
        ASSERT_OK(ConvertLlamaStateToPromptCache(Env::Default(), f.path, mid, Model(c), to_mlx));
        ASSERT_OK_AND_ASSIGN(LlamaConversionReport r, ConvertPromptCacheToLlamaState(Env::Default(), mid, back, Model(c)));
        EXPECT_EQ(r.dtype, dtype);
        EXPECT_TRUE(testing::ReadFileBytes(back) == testing::ReadFileBytes(f.path));
      }
    }
  }
  EXPECT_GT(files, 0u);
}

TEST(RoundTrips, MlxLmThroughLlamaCppGivesIdenticalTensors) {
  size_t cases = 0;
  testing::TempDir dir;
  for (const auto& c : LlamaFixtureCases()) {
    for (bool flash_attn : {true, false}) {
      SCOPED_TRACE(c.name + (flash_attn ? " fa on" : " fa off"));
      ++cases;
      const std::string in = c.Path("mlx_cache.safetensors");
      ASSERT_OK_AND_ASSIGN(LoadedPromptCache mlx, LoadPromptCache(Env::Default(), in));
      const DType dtype = (*mlx.cache[0]->State())[0].array().dtype();
      PromptCacheToLlamaOptions o;
      o.k_type = o.v_type = *DTypeToGgmlType(dtype);  // no rounding
      o.flash_attn = flash_attn;
      ASSERT_OK(ConvertPromptCacheToLlamaState(Env::Default(), in, dir.Join("x.ggsq"), Model(c), o));
      ASSERT_OK(ConvertLlamaStateToPromptCache(Env::Default(), dir.Join("x.ggsq"), dir.Join("y.safetensors"), Model(c)));
      ASSERT_OK_AND_ASSIGN(LoadedPromptCache back, LoadPromptCache(Env::Default(), dir.Join("y.safetensors")));
      ASSERT_EQ(back.cache.size(), mlx.cache.size());
      for (size_t l = 0; l < mlx.cache.size(); ++l) {
        for (size_t i = 0; i < 2; ++i) {
          EXPECT_EQ(Sha256((*back.cache[l]->State())[i].array()), Sha256((*mlx.cache[l]->State())[i].array()));
        }
      }
    }
  }
  EXPECT_GT(cases, 0u);
}

}  // namespace
}  // namespace kvstore
