// The tools' secret lookup (apps/common/secret.h): flag, file, environment.
#include "apps/common/secret.h"

#include <stdlib.h>

#include <fstream>

#include "testutil.h"

namespace kvapps {
namespace {

using kvstore::StatusCode;
using kvstore::testing::HasCode;

TEST(ResolveSharedSecretTest, FlagThenFileThenEnvironment) {
  kvstore::testing::TempDir dir;
  const std::string file = dir.Join("secret");
  {
    std::ofstream out(file, std::ios::binary);
    out << "from-file\r\n";
  }
  const std::string env(kSharedSecretEnv);
  unsetenv(env.c_str());
  EXPECT_EQ(ResolveSharedSecret("", "").value(), std::string());
  setenv(env.c_str(), "from-env", 1);
  EXPECT_EQ(ResolveSharedSecret("", "").value(), std::string("from-env"));
  EXPECT_EQ(ResolveSharedSecret("from-flag", "").value(), std::string("from-flag"));
  EXPECT_EQ(ResolveSharedSecret("", file).value(), std::string("from-file"));
  unsetenv(env.c_str());
  EXPECT_THAT(ResolveSharedSecret("x", file), HasCode(StatusCode::kInvalidArgument, "give one"));
  EXPECT_THAT(ResolveSharedSecret("", dir.Join("missing")), HasCode(StatusCode::kIOError, "cannot open"));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "\n";
  }
  EXPECT_THAT(ResolveSharedSecret("", file), HasCode(StatusCode::kInvalidArgument, "is empty"));
}

// "~/secret" is read from the home directory (kvstore::ExpandUserPath).
TEST(ResolveSharedSecretTest, SecretFileUnderTheHomeDirectory) {
  kvstore::testing::TempDir home;
  const char* old = getenv("HOME");
  const std::string saved = old != nullptr ? old : "";
  setenv("HOME", home.path().c_str(), 1);
  std::ofstream(home.Join("secret")) << "s3cret\n";
  kvstore::Result<std::string> secret = ResolveSharedSecret("", "~/secret");
  if (old != nullptr) setenv("HOME", saved.c_str(), 1); else unsetenv("HOME");
  EXPECT_EQ(secret.value(), "s3cret");
}

}  // namespace
}  // namespace kvapps
