// Helpers shared by the Env tests: run a test against both the POSIX Env
// (in a fresh temp directory) and the in-memory Env, and read/write whole
// files as strings.
#ifndef KVSTORE_TESTS_ENV_TEST_UTIL_H_
#define KVSTORE_TESTS_ENV_TEST_UTIL_H_

#include <memory>
#include <string>
#include <string_view>

#include "kvstore/env.h"
#include "testutil.h"

namespace kvstore::testing {

enum class EnvKind { kPosix, kMem };

inline std::string EnvKindName(const ::testing::TestParamInfo<EnvKind>& info) {
  return info.param == EnvKind::kPosix ? "Posix" : "Mem";
}

// Fixture: env() is the Env under test, Path(name) a path in an empty
// directory of it.
class EnvKindTest : public ::testing::TestWithParam<EnvKind> {
 protected:
  void SetUp() override {
    if (GetParam() == EnvKind::kPosix) {
      env_ = Env::Default();
      root_ = tmp_.path();
    } else {
      mem_ = NewMemEnv();
      env_ = mem_.get();
      root_ = "/mem/root";
      ASSERT_OK(env_->CreateDir(root_));
    }
  }

  Env* env() const { return env_; }
  const std::string& root() const { return root_; }
  std::string Path(std::string_view name) const { return root_ + "/" + std::string(name); }

 private:
  TempDir tmp_;
  std::unique_ptr<Env> mem_;
  Env* env_ = nullptr;
  std::string root_;
};

inline std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

inline std::string ToString(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// The whole content of `path` read through `env`.
inline Result<std::string> ReadString(Env* env, const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const ReadableFile> file, env->OpenReadable(path));
  return ToString(file->data());
}

// Creates `path` with `content` (not atomically, no sync).
inline Status WriteString(Env* env, const std::string& path, std::string_view content) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(path));
  KV_RETURN_IF_ERROR(file->Append(AsBytes(content)));
  return file->Close();
}

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_ENV_TEST_UTIL_H_
