#include "testutil.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "kvstore/float16.h"

namespace kvstore::testing {

std::string FixturesDir() { return KVSTORE_FIXTURES_DIR; }

std::string FixturePath(std::string_view relative) {
  return FixturesDir() + "/" + std::string(relative);
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
