// Model descriptions: config.json and GGUF metadata of the fixture models,
// the RoPE pairing table, refusals by name, and hostile GGUF headers.
#include <cstring>

#include "kvstore/llama_model.h"
#include "llama_cpp_testutil.h"
#include "testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;

// A GGUF v3 header with chosen key/value pairs (no tensors).
class GgufBuilder {
 public:
  GgufBuilder& Str(std::string_view key, std::string_view v) {
    Key(key, 8);
    Put<uint64_t>(v.size());
    Bytes(v);
    return *this;
  }
  GgufBuilder& U32(std::string_view key, uint32_t v) {
    Key(key, 4);
    Put(v);
    return *this;
  }
  GgufBuilder& ArrayU32(std::string_view key, const std::vector<uint32_t>& v) {
    Key(key, 9);
    Put<uint32_t>(4);
    Put<uint64_t>(v.size());
    for (uint32_t x : v) Put(x);
    return *this;
  }
  // A key with a raw type id and value bytes.
  GgufBuilder& Raw(std::string_view key, uint32_t type, std::string_view value) {
    Key(key, type);
    Bytes(value);
    return *this;
  }
  std::vector<std::byte> Build(uint32_t version = 3) const {
    GgufBuilder h;
    h.Bytes("GGUF");
    h.Put(version);
    h.Put<uint64_t>(0);
    h.Put<uint64_t>(n_);
    h.out_.insert(h.out_.end(), out_.begin(), out_.end());
    return h.out_;
  }
  // A tiny llama model (2 layers, 4 heads, 2 KV heads, head dim 16).
  static GgufBuilder Llama(std::string_view arch = "llama", bool head_count_kv = true) {
    GgufBuilder b;
    const std::string p(arch);
    b.Str("general.architecture", arch).U32(p + ".block_count", 2).U32(p + ".attention.head_count", 4);
    b.U32(p + ".embedding_length", 64);
    if (head_count_kv) b.U32(p + ".attention.head_count_kv", 2);
    return b;
  }

 private:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void Bytes(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + s.size());
  }
  void Key(std::string_view key, uint32_t type) {
    ++n_;
    Put<uint64_t>(key.size());
    Bytes(key);
    Put(type);
  }
  std::vector<std::byte> out_;
  uint64_t n_ = 0;
};

void ExpectMatchesExpected(const LlamaModelInfo& m, const Json& model) {
  EXPECT_EQ(m.architecture, model.Find("architecture")->as_string());
  EXPECT_EQ(m.n_layer, model.Find("n_layer")->as_int());
  EXPECT_EQ(m.n_head, model.Find("n_head")->as_int());
  EXPECT_EQ(m.n_head_kv, model.Find("n_head_kv")->as_int());
  EXPECT_EQ(m.head_dim_k, model.Find("head_dim")->as_int());
  EXPECT_EQ(m.head_dim_v, model.Find("head_dim")->as_int());
  EXPECT_EQ(m.n_embd_k(), model.Find("n_embd_k_gqa")->as_int());
  EXPECT_EQ(std::string(m.rope.rope_style), model.Find("llama_cpp_rope_type")->as_string());
  EXPECT_EQ(m.rope.key_order == KeyChannelOrder::kAdjacentPairs, model.Find("gguf_qk_permuted")->as_bool());
  ASSERT_TRUE(m.dtype.has_value());
  const std::string dtype = model.Find("dtype")->as_string();
  EXPECT_EQ(*m.dtype, dtype == "float32" ? DType::kF32 : dtype == "float16" ? DType::kF16 : DType::kBF16);
}

TEST(LlamaModelFixtures, ConfigAndGgufDescribeTheSameModel) {
  size_t cases = 0;
  for (const auto& c : testing::LlamaFixtureCases()) {
    SCOPED_TRACE(c.name);
    ++cases;
    const Json& expected = *c.expected.Find("model");
    ASSERT_OK_AND_ASSIGN(LlamaModelInfo folder, ReadLlamaModel(Env::Default(), c.Path("model")));
    ASSERT_OK_AND_ASSIGN(LlamaModelInfo config, ReadLlamaModel(Env::Default(), c.Path("model/config.json")));
    ASSERT_OK_AND_ASSIGN(LlamaModelInfo gguf, ReadLlamaModel(Env::Default(), c.Path("model/model.gguf")));
    EXPECT_EQ(folder.source, "config.json");
    EXPECT_EQ(gguf.source, "GGUF");
    for (const LlamaModelInfo* m : {&folder, &config, &gguf}) ExpectMatchesExpected(*m, expected);
    EXPECT_EQ(config.rope_dims, gguf.rope_dims);
  }
  EXPECT_EQ(cases, testing::LlamaManifestCaseCount());
}

TEST(LlamaModel, MissingModelIsNotFound) {
  EXPECT_THAT(ReadLlamaModel(Env::Default(), "/nonexistent/model"), HasCode(StatusCode::kNotFound, "/nonexistent/model"));
  testing::TempDir dir;
  EXPECT_THAT(ReadLlamaModel(Env::Default(), dir.path()), HasCode(StatusCode::kNotFound, "config.json"));
}

TEST(RopeTable, PairingByArchitecture) {
  for (std::string_view name : {"llama", "mistral", "granite"}) {
    ASSERT_OK_AND_ASSIGN(RopeArchitecture r, LookupRopeArchitecture(name));
    EXPECT_EQ(r.key_order, KeyChannelOrder::kAdjacentPairs) << name;
    EXPECT_EQ(r.rope_style, "norm");
  }
  for (std::string_view name : {"qwen2", "qwen2moe", "qwen3_moe", "phi3", "gemma", "olmo2", "starcoder2"}) {
    ASSERT_OK_AND_ASSIGN(RopeArchitecture r, LookupRopeArchitecture(name));
    EXPECT_EQ(r.key_order, KeyChannelOrder::kSame) << name;
    EXPECT_EQ(r.rope_style, "neox");
  }
  ASSERT_OK_AND_ASSIGN(RopeArchitecture mistral, LookupRopeArchitecture("mistral"));
  EXPECT_EQ(mistral.llama_cpp_name, "llama");
  EXPECT_THAT(LookupRopeArchitecture("frobnicator"),
              HasCode(StatusCode::kNotSupported, "architecture 'frobnicator' is not in the RoPE pairing table (known: llama, mistral"));
  EXPECT_THAT(LookupRopeArchitecture("gemma3"), HasCode(StatusCode::kNotSupported, "'gemma3' uses sliding-window attention"));
  EXPECT_THAT(LookupRopeArchitecture("deepseek_v3"), HasCode(StatusCode::kNotSupported, "latent attention (MLA caches)"));
  EXPECT_THAT(LookupRopeArchitecture("qwen2_vl"), HasCode(StatusCode::kNotSupported, "M-RoPE"));
  EXPECT_THAT(LookupRopeArchitecture("jamba"), HasCode(StatusCode::kNotSupported, "hybrid or recurrent"));
  EXPECT_THAT(LookupRopeArchitecture("llama4"), HasCode(StatusCode::kNotSupported, "chunked attention"));
  EXPECT_FALSE(RopeArchitectures().empty());
}

constexpr std::string_view kLlamaConfig =
    R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 64, "torch_dtype": "bfloat16")";

std::string Config(std::string_view extra) { return std::string(kLlamaConfig) + std::string(extra) + "}"; }

TEST(HfConfig, DefaultsAndDerivedDims) {
  ASSERT_OK_AND_ASSIGN(LlamaModelInfo m, ParseHfConfig(Config("")));
  EXPECT_EQ(m.head_dim_k, 16);
  EXPECT_EQ(m.rope_dims, 16);
  EXPECT_EQ(m.dtype, DType::kBF16);
  ASSERT_OK_AND_ASSIGN(m, ParseHfConfig(Config(R"(, "partial_rotary_factor": 0.5, "head_dim": 32)")));
  EXPECT_EQ(m.head_dim_k, 32);
  EXPECT_EQ(m.rope_dims, 16);
  ASSERT_OK_AND_ASSIGN(m, ParseHfConfig(
      R"({"model_type": "qwen3", "num_hidden_layers": 3, "num_attention_heads": 8, "hidden_size": 64})"));
  EXPECT_EQ(m.n_head_kv, 8);  // defaults to the attention heads
  EXPECT_EQ(m.rope.key_order, KeyChannelOrder::kSame);
  EXPECT_FALSE(m.dtype.has_value());
  // qwen2's configs carry a sliding window that is switched off.
  EXPECT_OK(ParseHfConfig(Config(R"(, "sliding_window": 4096, "use_sliding_window": false)")));
}

TEST(HfConfig, BadValuesNameTheKey) {
  EXPECT_THAT(ParseHfConfig("{"), HasCode(StatusCode::kInvalidArgument, "config.json"));
  EXPECT_THAT(ParseHfConfig("[]"), HasCode(StatusCode::kInvalidArgument, "not a JSON object"));
  EXPECT_THAT(ParseHfConfig(R"({"num_hidden_layers": 2})"), HasCode(StatusCode::kInvalidArgument, "\"model_type\" is missing"));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "llama", "num_attention_heads": 4, "hidden_size": 64})"),
              HasCode(StatusCode::kInvalidArgument, "\"num_hidden_layers\" is missing"));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "llama", "num_hidden_layers": -2, "num_attention_heads": 4, "hidden_size": 64})"),
              HasCode(StatusCode::kInvalidArgument, "\"num_hidden_layers\" is not a positive 32-bit integer"));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 66})"),
              HasCode(StatusCode::kInvalidArgument, "hidden_size 66 is not a multiple of num_attention_heads 4"));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4})"),
              HasCode(StatusCode::kInvalidArgument, "\"hidden_size\" is missing"));
  EXPECT_THAT(ParseHfConfig(std::string(R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,)") +
                            R"("num_key_value_heads": 3, "hidden_size": 64})"),
              HasCode(StatusCode::kInvalidArgument, "n_head 4 is not a multiple of n_head_kv 3"));
  EXPECT_THAT(ParseHfConfig(Config(R"(, "partial_rotary_factor": 0.3)")),
              HasCode(StatusCode::kInvalidArgument, "partial_rotary_factor gives 4.8"));
}

// torch_dtype (or its newer name dtype) names the model's float type; any
// other type is refused, not silently ignored.
TEST(HfConfig, TorchDtypeThatIsNotAFloatIsRefused) {
  const std::string base =
      R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, )";
  EXPECT_THAT(ParseHfConfig(base + R"("torch_dtype": "int8"})"),
              HasCode(StatusCode::kNotSupported, "config.json: \"torch_dtype\" \"int8\" is not a float type"));
  EXPECT_THAT(ParseHfConfig(base + R"("dtype": "float8_e4m3fn"})"),
              HasCode(StatusCode::kNotSupported, "\"dtype\" \"float8_e4m3fn\" is not a float type"));
  EXPECT_THAT(ParseHfConfig(base + R"("torch_dtype": 16})"),
              HasCode(StatusCode::kInvalidArgument, "\"torch_dtype\" is not a string"));
  ASSERT_OK_AND_ASSIGN(LlamaModelInfo m, ParseHfConfig(base + R"("torch_dtype": null, "dtype": "float16"})"));
  EXPECT_EQ(m.dtype, DType::kF16);
}

TEST(HfConfig, UnconvertibleModelsAreRefusedByName) {
  EXPECT_THAT(ParseHfConfig(Config(R"(, "kv_lora_rank": 512)")), HasCode(StatusCode::kNotSupported, "latent attention"));
  EXPECT_THAT(ParseHfConfig(Config(R"(, "layer_types": ["full_attention", "sliding_attention"])")),
              HasCode(StatusCode::kNotSupported, "layer_types declares sliding-window layers"));
  EXPECT_THAT(ParseHfConfig(Config(R"(, "layer_types": ["linear_attention", "full_attention"])")),
              HasCode(StatusCode::kNotSupported, "\"linear_attention\" layers (hybrid or recurrent)"));
  EXPECT_THAT(ParseHfConfig(Config(R"(, "sliding_window": 4096, "use_sliding_window": true)")),
              HasCode(StatusCode::kNotSupported, "sliding-window attention"));
  EXPECT_THAT(ParseHfConfig(Config(R"(, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]})")),
              HasCode(StatusCode::kNotSupported, "M-RoPE"));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "gemma2", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64})"),
              HasCode(StatusCode::kNotSupported, "'gemma2' uses sliding-window attention"));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "llava", "num_hidden_layers": 2})"),
              HasCode(StatusCode::kNotSupported, "'llava' is not in the RoPE pairing table"));
}

TEST(GgufModel, ParsesTheHeaderMetadata) {
  ASSERT_OK_AND_ASSIGN(LlamaModelInfo m, ParseGgufModel(GgufBuilder::Llama().U32("general.file_type", 1).Build()));
  EXPECT_EQ(m.n_layer, 2);
  EXPECT_EQ(m.head_dim_k, 16);  // embedding_length / head_count
  EXPECT_EQ(m.rope_dims, 16);
  EXPECT_EQ(m.dtype, DType::kF16);
  EXPECT_EQ(m.rope.key_order, KeyChannelOrder::kAdjacentPairs);
  // Per-layer head counts (arrays) are accepted when uniform.
  ASSERT_OK_AND_ASSIGN(m, ParseGgufModel(GgufBuilder::Llama("llama", false).ArrayU32("llama.attention.head_count_kv", {2, 2}).Build(2)));
  EXPECT_EQ(m.n_head_kv, 2);
  EXPECT_FALSE(m.dtype.has_value());
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama("llama", false).ArrayU32("llama.attention.head_count_kv", {2, 1}).Build()),
              HasCode(StatusCode::kNotSupported, "per-layer values differ"));
  GgufBuilder no_layers;
  no_layers.Str("general.architecture", "qwen2").U32("qwen2.attention.head_count", 4);
  EXPECT_THAT(ParseGgufModel(no_layers.Build()), HasCode(StatusCode::kInvalidArgument, "qwen2.block_count is missing"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder().U32("x", 1).Build()), HasCode(StatusCode::kInvalidArgument, "general.architecture is missing"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Str("llama.block_count", "2").Build()),
              HasCode(StatusCode::kCorruption, "duplicate key 'llama.block_count'"));
}

TEST(GgufModel, UnconvertibleModelsAreRefusedByName) {
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama("gemma3").Build()), HasCode(StatusCode::kNotSupported, "sliding-window"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama("phi3").U32("phi3.attention.sliding_window", 2047).Build()),
              HasCode(StatusCode::kNotSupported, "phi3.attention.sliding_window declares sliding-window attention"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().U32("llama.attention.kv_lora_rank", 512).Build()),
              HasCode(StatusCode::kNotSupported, "latent attention"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama("qwen2").ArrayU32("qwen2.rope.dimension_sections", {16, 24, 24, 0}).Build()),
              HasCode(StatusCode::kNotSupported, "M-RoPE"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().U32("llama.ssm.state_size", 16).Build()),
              HasCode(StatusCode::kNotSupported, "llama.ssm.state_size declares recurrent layers"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama("bert").Build()), HasCode(StatusCode::kNotSupported, "'bert' is not in the RoPE pairing table"));
}

TEST(GgufModel, HostileHeadersAreRefused) {
  const std::vector<std::byte> good = GgufBuilder::Llama().Str("general.name", "x").Build();
  ASSERT_OK(ParseGgufModel(good));
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<std::byte> cut(good.begin(), good.begin() + n);
    ASSERT_TRUE(ParseGgufModel(cut).status().IsCorruption()) << n;
  }
  std::vector<std::byte> b = good;
  b[0] = std::byte{'X'};
  EXPECT_THAT(ParseGgufModel(b), HasCode(StatusCode::kCorruption, "magic is not 'GGUF'"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Build(1)), HasCode(StatusCode::kNotSupported, "version 1"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Build(0x03000000)), HasCode(StatusCode::kNotSupported, "big-endian"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Build(4)), HasCode(StatusCode::kNotSupported, "version 4"));
  b = good;
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(b.data() + 16, &huge, 8);  // n_kv
  EXPECT_THAT(ParseGgufModel(b), HasCode(StatusCode::kCorruption, "n_kv 1152921504606846976 does not fit"));
  const std::string u64_max("\xff\xff\xff\xff\xff\xff\xff\xff", 8);
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Raw("s", 8, u64_max).Build()),
              HasCode(StatusCode::kCorruption, "key 's' at offset"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Raw("u", 10, u64_max).Build()),
              HasCode(StatusCode::kCorruption, "key 'u' u64 value 18446744073709551615 is out of range"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Raw("t", 13, "").Build()),
              HasCode(StatusCode::kCorruption, "key 't' has unknown value type 13"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Raw("b", 7, "\x02").Build()),
              HasCode(StatusCode::kCorruption, "key 'b' bool byte 2 is not 0 or 1"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Raw("a", 9, std::string("\x09\0\0\0\1\0\0\0\0\0\0\0", 12)).Build()),
              HasCode(StatusCode::kCorruption, "key 'a' is an array of arrays"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Raw("a", 9, std::string("\x08\0\0\0", 4) + u64_max).Build()),
              HasCode(StatusCode::kCorruption, "key 'a' count 18446744073709551615 does not fit"));
  EXPECT_THAT(ParseGgufModel(GgufBuilder::Llama().Raw("a", 9, std::string("\x0d\0\0\0\1\0\0\0\0\0\0\0", 12)).Build()),
              HasCode(StatusCode::kCorruption, "key 'a' has unknown element type 13"));
  b = GgufBuilder::Llama().Build();
  std::memcpy(b.data() + 24, &huge, 8);  // the first key's length
  EXPECT_THAT(ParseGgufModel(b), HasCode(StatusCode::kCorruption, "metadata entry 0 key length 1152921504606846976 is not in 1..65536"));
}

}  // namespace
}  // namespace kvstore
