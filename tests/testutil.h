// Shared helpers for kvstore tests: Status matchers, fixture paths, temp dirs.
#ifndef KVSTORE_TESTS_TESTUTIL_H_
#define KVSTORE_TESTS_TESTUTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/status.h"

namespace kvstore::testing {

// EXPECT_OK(status_or_result)
#define EXPECT_OK(expr) EXPECT_TRUE(::kvstore::testing::StatusOf(expr).ok()) \
    << ::kvstore::testing::StatusOf(expr).ToString()
#define ASSERT_OK(expr) ASSERT_TRUE(::kvstore::testing::StatusOf(expr).ok()) \
    << ::kvstore::testing::StatusOf(expr).ToString()
// ASSERT_OK_AND_ASSIGN(auto x, F());
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(KVSTORE_CONCAT_(kv_test_result_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)   \
  auto tmp = (expr);                                 \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();  \
  lhs = std::move(tmp).value()

inline Status StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}

// Matches a Status or Result whose code is `code` and whose message contains
// `substr` (if given).
MATCHER_P2(HasCode, code, substr,
           std::string("has code ") + std::string(::kvstore::StatusCodeName(code)) +
               " and message containing \"" + std::string(substr) + "\"") {
  ::kvstore::Status s = ::kvstore::testing::StatusOf(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code && std::string(s.message()).find(substr) != std::string::npos;
}
MATCHER(IsOk, "is OK") {
  ::kvstore::Status s = ::kvstore::testing::StatusOf(arg);
  *result_listener << "status is " << s.ToString();
  return s.ok();
}

// Root of the repository's fixtures/ directory.
std::string FixturesDir();
// FixturesDir() + "/" + relative.
std::string FixturePath(std::string_view relative);
// Every fixtures/mlx-lm/*.safetensors (sorted full paths). Fails the test
// (ADD_FAILURE) when fixtures/mlx-lm/manifest.json cannot be read or lists a
// top-level file that is missing, so a loop over the result never passes on
// an empty or partial folder.
std::vector<std::string> MlxLmFixtures();
// How many top-level files fixtures/mlx-lm ships: a loop over MlxLmFixtures()
// that expects every file to qualify sees at least this many (more fixtures
// may be added, never fewer).
inline constexpr size_t kMlxLmFixturesShipped = 19;

// Whole file as bytes / string. Fails the test (ADD_FAILURE) when unreadable.
std::vector<std::byte> ReadFileBytes(const std::string& path);
std::string ReadFileString(const std::string& path);

// A fresh empty directory under $TMPDIR, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

// Bytes from a string literal, e.g. Bytes("\x08\0\0\0\0\0\0\0{}      ").
inline std::vector<std::byte> Bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return std::vector<std::byte>(p, p + s.size());
}

// A deterministic pseudo-random F32/F16/BF16 array with values ~N(0,1).
Array RandomArray(DType dtype, const Shape& shape, uint64_t seed);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_TESTUTIL_H_
