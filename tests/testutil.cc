#include "testutil.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

#include "kvstore/float16.h"

namespace kvstore::testing {

std::string FixturesDir() { return KVSTORE_FIXTURES_DIR; }

std::string FixturePath(std::string_view relative) {
  return FixturesDir() + "/" + std::string(relative);
}

std::vector<std::string> MlxLmFixtures() {
  const std::string dir = FixturePath("mlx-lm");
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  const nlohmann::json manifest = nlohmann::json::parse(ReadFileString(dir + "/manifest.json"), nullptr, false);
  if (!manifest.is_object() || !manifest.contains("fixtures") || !manifest["fixtures"].is_array()) {
    ADD_FAILURE() << dir << "/manifest.json: no \"fixtures\" list";
    return out;
  }
  size_t listed = 0;
  for (const nlohmann::json& f : manifest["fixtures"]) {
    const std::string file = f.value("file", "");
    if (file.find('/') != std::string::npos) continue;  // versioned subfolders have tests of their own
    ++listed;
    if (!std::binary_search(out.begin(), out.end(), dir + "/" + file)) ADD_FAILURE() << "missing fixture " << file;
  }
  if (listed == 0) ADD_FAILURE() << dir << "/manifest.json lists no fixture";
  return out;
}

std::vector<std::byte> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

std::string ReadFileString(const std::string& path) {
  std::vector<std::byte> b = ReadFileBytes(path);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

TempDir::TempDir() {
  std::string base = std::filesystem::temp_directory_path().string() + "/kvstore_test_XXXXXX";
  std::vector<char> buf(base.begin(), base.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << base;
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Array RandomArray(DType dtype, const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  int64_t n = ShapeNumel(shape);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = dist(rng);
  Array f32 = Array::FromValues<float>(DType::kF32, shape, values);
  if (dtype == DType::kF32) return f32;
  return f32.AsType(dtype).value();
}

}  // namespace kvstore::testing
