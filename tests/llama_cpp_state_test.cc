// The ggsq reader and writer on files llama.cpp wrote: exact structure,
// identical bytes when re-written, and the writer's own contract.
#include <cstring>

#include "kvstore/llama_state.h"
#include "libkvstore/integrity/sha256.h"
#include "llama_cpp_testutil.h"
#include "testutil.h"

namespace kvstore {
namespace {

using testing::HasCode;
using testing::LlamaFixtureCases;

std::span<const std::byte> Span(const std::vector<std::byte>& v) { return v; }

TEST(LlamaStateFixtures, StructureMatchesWhatLlamaCppReports) {
  size_t cases = 0, files = 0;
  for (const auto& c : LlamaFixtureCases()) {
    ++cases;
    const Json& model = *c.expected.Find("model");
    auto tokens = Json::Parse(testing::ReadFileString(c.Path("tokens.json")));
    ASSERT_OK(tokens);
    for (const auto& f : c.files) {
      SCOPED_TRACE(c.name + "/" + f.name);
      ++files;
      const std::vector<std::byte> bytes = testing::ReadFileBytes(f.path);
      ASSERT_OK_AND_ASSIGN(LlamaState st, ParseLlamaState(bytes));
      EXPECT_EQ(st.FileBytes(), bytes.size());
      ASSERT_EQ(st.tokens.size(), static_cast<size_t>(f.expected.Find("n_tokens_in_header")->as_int()));
      for (size_t i = 0; i < st.tokens.size(); ++i) EXPECT_EQ(st.tokens[i], (*tokens).as_array()[i].as_int());
      ASSERT_EQ(st.streams.size(), static_cast<size_t>(f.expected.Find("n_stream")->as_int()));
      const size_t stream = static_cast<size_t>(f.expected.Find("stream")->as_int());
      const size_t cells = static_cast<size_t>(f.expected.Find("cell_count")->as_int());
      for (size_t s = 0; s < st.streams.size(); ++s) {
        const LlamaStateStream& ss = st.streams[s];
        if (s != stream) {
          EXPECT_EQ(ss.cell_count(), 0u) << "stream " << s;
          continue;
        }
        ASSERT_EQ(ss.cell_count(), cells);
        for (size_t i = 0; i < cells; ++i) {
          EXPECT_EQ(ss.positions[i], static_cast<int32_t>(i));  // "0..T-1", in order
          EXPECT_EQ(ss.seq_ids[i], f.expected.Find("seq_id")->as_int());
        }
        EXPECT_EQ(ss.v_trans, f.expected.Find("v_trans")->as_int() == 1);
        ASSERT_EQ(ss.layers.size(), static_cast<size_t>(model.Find("n_layer")->as_int()));
        for (const LlamaStateLayer& l : ss.layers) {
          EXPECT_EQ(GgmlTypeName(static_cast<int32_t>(l.k_type)), f.expected.Find("k_type")->as_string());
          EXPECT_EQ(GgmlTypeName(static_cast<int32_t>(l.v_type)), f.expected.Find("v_type")->as_string());
          EXPECT_EQ(l.n_embd_k, model.Find("n_embd_k_gqa")->as_int());
          EXPECT_EQ(l.n_embd_v, model.Find("n_head_kv")->as_int() * model.Find("head_dim")->as_int());
        }
      }
    }
  }
  EXPECT_EQ(cases, testing::LlamaManifestCaseCount());
  EXPECT_GT(cases, 0u);
  EXPECT_GE(files, 2 * cases);  // every case has flash attention on and off
}

TEST(LlamaStateFixtures, CopiesMatchTheManifestDigests) {
  auto manifest = Json::Parse(testing::ReadFileString(testing::FixturePath("llama.cpp/manifest.json")));
  ASSERT_OK(manifest);
  size_t checked = 0;
  for (const auto& [name, files] : manifest->Find("cases")->as_object()) {
    for (const auto& [file, info] : files.as_object()) {
      const std::string path = testing::FixturePath("llama.cpp/" + name + "/" + file);
      if (file == "model/model.safetensors") continue;  // the HF weights are not used by any test
      SCOPED_TRACE(path);
      EXPECT_EQ(Sha256(Span(testing::ReadFileBytes(path))).ToHex(), info.Find("sha256")->as_string());
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

TEST(LlamaStateFixtures, RewritingALlamaCppFileGivesIdenticalBytes) {
  size_t files = 0;
  for (const auto& c : LlamaFixtureCases()) {
    for (const auto& f : c.files) {
      SCOPED_TRACE(f.path);
      const std::vector<std::byte> bytes = testing::ReadFileBytes(f.path);
      ASSERT_OK_AND_ASSIGN(LlamaState st, ParseLlamaState(bytes));
      auto env = NewMemEnv();
      ASSERT_OK(SaveLlamaState(env.get(), "out.ggsq", st, [&](size_t s, size_t l, bool value) {
        const LlamaStateLayer& layer = st.streams[s].layers[l];
        const uint64_t n = value ? LlamaState::VBytes(st.streams[s], layer) : LlamaState::KBytes(st.streams[s], layer);
        return Result<std::span<const std::byte>>(Span(bytes).subspan(value ? layer.v_offset : layer.k_offset, n));
      }));
      ASSERT_OK_AND_ASSIGN(auto out, env->OpenReadable("out.ggsq"));
      ASSERT_EQ(out->size(), bytes.size());
      EXPECT_EQ(std::memcmp(out->data().data(), bytes.data(), bytes.size()), 0);
      ++files;
    }
  }
  EXPECT_GT(files, 0u);
}

// A state built in memory: two streams, cells out of position order, V transposed.
LlamaState SyntheticState(GgmlType type) {
  LlamaState st;
  st.tokens = {5, 6, 7};
  st.streams.resize(2);
  LlamaStateStream& s = st.streams[1];
  s.positions = {2, 0, 1};
  s.seq_ids = {1, 1, 1};
  s.v_trans = true;
  s.layers.assign(2, LlamaStateLayer{.k_type = type, .v_type = type, .n_embd_k = 4, .n_embd_v = 6});
  return st;
}

TEST(LlamaStateWriter, WritesWhatTheReaderReadsBack) {
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    const LlamaState st = SyntheticState(type);
    std::vector<std::byte> block;
    auto env = NewMemEnv();
    ASSERT_OK(SaveLlamaState(env.get(), "s.ggsq", st, [&](size_t s, size_t l, bool value) {
      const auto& layer = st.streams[s].layers[l];
      block.assign(value ? LlamaState::VBytes(st.streams[s], layer) : LlamaState::KBytes(st.streams[s], layer),
                   std::byte{static_cast<unsigned char>(l * 2 + value)});
      return Result<std::span<const std::byte>>(std::span<const std::byte>(block));
    }));
    ASSERT_OK_AND_ASSIGN(auto file, env->OpenReadable("s.ggsq"));
    ASSERT_OK_AND_ASSIGN(LlamaState back, ParseLlamaState(file->data()));
    EXPECT_EQ(file->size(), st.FileBytes());
    EXPECT_EQ(back.tokens, st.tokens);
    ASSERT_EQ(back.streams.size(), 2u);
    EXPECT_EQ(back.streams[0].cell_count(), 0u);
    EXPECT_EQ(back.streams[1].positions, st.streams[1].positions);
    EXPECT_EQ(back.streams[1].seq_ids, st.streams[1].seq_ids);
    EXPECT_TRUE(back.streams[1].v_trans);
    ASSERT_EQ(back.streams[1].layers.size(), 2u);
    const LlamaStateLayer& l1 = back.streams[1].layers[1];
    EXPECT_EQ(l1.k_type, type);
    EXPECT_EQ(l1.n_embd_k, 4u);
    EXPECT_EQ(l1.n_embd_v, 6u);
    EXPECT_EQ(file->data()[l1.v_offset], std::byte{3});
    EXPECT_EQ(file->data()[l1.k_offset], std::byte{2});
  }
}

TEST(LlamaStateWriter, RefusesInconsistentStatesAndWrongDataSizes) {
  auto env = NewMemEnv();
  const std::vector<std::byte> none;
  auto empty_data = [&](size_t, size_t, bool) { return Result<std::span<const std::byte>>(std::span<const std::byte>(none)); };
  LlamaState st;
  EXPECT_THAT(SaveLlamaState(env.get(), "x", st, empty_data), HasCode(StatusCode::kInvalidArgument, "no streams"));
  st = SyntheticState(GgmlType::kF16);
  st.streams[1].seq_ids.pop_back();
  EXPECT_THAT(SaveLlamaState(env.get(), "x", st, empty_data), HasCode(StatusCode::kInvalidArgument, "differ in length"));
  st = SyntheticState(GgmlType::kF16);
  st.streams[1].layers.clear();
  EXPECT_THAT(SaveLlamaState(env.get(), "x", st, empty_data), HasCode(StatusCode::kInvalidArgument, "without layers"));
  st = SyntheticState(GgmlType::kF16);
  EXPECT_THAT(SaveLlamaState(env.get(), "x", st, empty_data),
              HasCode(StatusCode::kInvalidArgument, "stream 1 layer 0 K data has 0 bytes, expected 24"));
  EXPECT_FALSE(env->FileExists("x"));
}

TEST(LlamaStateWriter, AFailedWriteLeavesTheOldFile) {
  auto mem = NewMemEnv();
  ASSERT_OK(WriteStringAtomic(mem.get(), "s.ggsq", std::as_bytes(std::span<const char>("old", 3))));
  FaultInjectionEnv env(mem.get());
  env.FailNth(FaultInjectionEnv::Op::kAppend, 2);
  const LlamaState st = SyntheticState(GgmlType::kF16);
  std::vector<std::byte> block;
  Status s = SaveLlamaState(&env, "s.ggsq", st, [&](size_t si, size_t l, bool value) {
    const auto& layer = st.streams[si].layers[l];
    block.assign(value ? LlamaState::VBytes(st.streams[si], layer) : LlamaState::KBytes(st.streams[si], layer),
                 std::byte{0});
    return Result<std::span<const std::byte>>(std::span<const std::byte>(block));
  });
  EXPECT_THAT(s, HasCode(StatusCode::kIOError, "injected"));
  ASSERT_OK_AND_ASSIGN(auto file, mem->OpenReadable("s.ggsq"));
  EXPECT_EQ(file->size(), 3u);
}

TEST(GgmlTypes, NamesAndConversions) {
  EXPECT_EQ(GgmlTypeName(0), "f32");
  EXPECT_EQ(GgmlTypeName(1), "f16");
  EXPECT_EQ(GgmlTypeName(30), "bf16");
  EXPECT_EQ(GgmlTypeName(8), "q8_0");
  EXPECT_EQ(GgmlTypeName(2), "q4_0");
  EXPECT_EQ(GgmlTypeName(4), "type 4");
  EXPECT_EQ(GgmlTypeName(-1), "type -1");
  EXPECT_EQ(GgmlTypeName(1000), "type 1000");
  EXPECT_EQ(ParseGgmlType("bf16"), GgmlType::kBF16);
  EXPECT_EQ(ParseGgmlType("q8_0"), std::nullopt);
  EXPECT_EQ(DTypeToGgmlType(DType::kF64), std::nullopt);
  EXPECT_EQ(GgmlTypeToDType(GgmlType::kBF16), DType::kBF16);
}

}  // namespace
}  // namespace kvstore
