#include "llama_cpp_testutil.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "kvstore/float16.h"
#include "testutil.h"

namespace kvstore::testing {

std::vector<LlamaFixtureCase> LlamaFixtureCases() {
  std::vector<LlamaFixtureCase> cases;
  const std::filesystem::path root = FixturePath("llama.cpp");
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    LlamaFixtureCase c;
    c.name = entry.path().filename().string();
    c.dir = entry.path().string();
    auto expected = Json::Parse(ReadFileString(c.Path("expected.json")));
    if (!expected.ok()) {
      ADD_FAILURE() << c.name << "/expected.json: " << expected.status().ToString();
      continue;
    }
    c.expected = *expected;
    if (const Json* files = c.expected.Find("llama_cpp_files"); files != nullptr && files->is_object()) {
      for (const auto& [name, info] : files->as_object()) {
        LlamaFixtureFile f{name, c.Path(name), info};
        if (!std::filesystem::exists(f.path)) ADD_FAILURE() << "missing fixture " << f.path;
        c.files.push_back(std::move(f));
      }
    }
    cases.push_back(std::move(c));
  }
  std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return cases;
}

size_t LlamaManifestCaseCount() {
  auto manifest = Json::Parse(ReadFileString(FixturePath("llama.cpp/manifest.json")));
  if (!manifest.ok() || manifest->Find("cases") == nullptr) {
    ADD_FAILURE() << "fixtures/llama.cpp/manifest.json is unreadable";
    return 0;
  }
  return manifest->Find("cases")->size();
}

namespace {

float ElementAsFloat(const std::byte* p, GgmlType type) {
  if (type == GgmlType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return type == GgmlType::kF16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
}

}  // namespace

std::vector<float> LlamaBlockFloats(std::span<const std::byte> bytes, const LlamaState& state, size_t stream,
                                    size_t layer, bool value) {
  const LlamaStateStream& st = state.streams[stream];
  const LlamaStateLayer& l = st.layers[layer];
  const GgmlType type = value ? l.v_type : l.k_type;
  const size_t es = DTypeSize(GgmlTypeToDType(type));
  const size_t cells = st.cell_count(), width = value ? l.n_embd_v : l.n_embd_k;
  const std::byte* base = bytes.data() + (value ? l.v_offset : l.k_offset);
  std::vector<float> out(cells * width);
  for (size_t i = 0; i < cells; ++i) {
    for (size_t e = 0; e < width; ++e) {
      const size_t at = value && st.v_trans ? e * cells + i : i * width + e;
      out[i * width + e] = ElementAsFloat(base + at * es, type);
    }
  }
  return out;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

std::vector<float> ArrayFloats(const Array& a) { return a.AsType(DType::kF32).value().ToVector<float>(); }

}  // namespace kvstore::testing
