// ExpandUserPath ("~" as a shell expands it) and the options that use it: a
// store opened at "~/..." lives in the home directory, and a secret file at
// "~/..." is read from there, never from a directory named "~".
#include "kvstore/user_path.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "kvstore/prompt_cache_store.h"
#include "kvstore/shared_tier_admin.h"
#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

// Sets $HOME for one test and restores it after.
class ScopedHome {
 public:
  explicit ScopedHome(const char* home) {
    if (const char* old = std::getenv("HOME")) old_ = old;
    if (home != nullptr) {
      setenv("HOME", home, 1);
    } else {
      unsetenv("HOME");
    }
  }
  ~ScopedHome() {
    if (old_) {
      setenv("HOME", old_->c_str(), 1);
    } else {
      unsetenv("HOME");
    }
  }

 private:
  std::optional<std::string> old_;
};

std::string PasswdHome(uid_t uid) {
  struct passwd* p = getpwuid(uid);
  return p != nullptr && p->pw_dir != nullptr ? p->pw_dir : "";
}

TEST(ExpandUserPathTest, TildeIsTheHomeDirectory) {
  ScopedHome home("/home/ada");
  EXPECT_EQ(ExpandUserPath("~").value(), "/home/ada");
  EXPECT_EQ(ExpandUserPath("~/").value(), "/home/ada/");
  EXPECT_EQ(ExpandUserPath("~/.cache/kv").value(), "/home/ada/.cache/kv");
  ScopedHome slash("/home/ada/");
  EXPECT_EQ(ExpandUserPath("~/x").value(), "/home/ada/x");
  ScopedHome root("/");
  EXPECT_EQ(ExpandUserPath("~/x").value(), "/x");
  EXPECT_EQ(ExpandUserPath("~").value(), "/");
}

TEST(ExpandUserPathTest, OtherPathsAreUnchanged) {
  ScopedHome home("/home/ada");
  for (const char* path : {"", "x", "/abs/~/x", "a/~", "./~", " ~", "redis://h:1"}) {
    EXPECT_EQ(ExpandUserPath(path).value(), path);
  }
}

TEST(ExpandUserPathTest, WithoutHomeThePasswordDatabaseAnswers) {
  const std::string expected = PasswdHome(getuid());
  ScopedHome none(nullptr);
  if (expected.empty()) {
    EXPECT_THAT(ExpandUserPath("~/x"), HasCode(StatusCode::kInvalidArgument, "$HOME is not set"));
  } else {
    EXPECT_EQ(ExpandUserPath("~/x").value(), expected + (expected == "/" ? "x" : "/x"));
  }
}

TEST(ExpandUserPathTest, TildeNameIsThatUsersHome) {
  struct passwd* me = getpwuid(getuid());
  ASSERT_NE(me, nullptr);
  const std::string name = me->pw_name, dir = me->pw_dir;
  EXPECT_EQ(ExpandUserPath("~" + name).value(), dir);
  EXPECT_THAT(ExpandUserPath("~no-such-user-kvstore/x"),
              HasCode(StatusCode::kInvalidArgument, "no user \"no-such-user-kvstore\""));
}

// The store's directory option: "~/store" is $HOME/store, and nothing named
// "~" appears in the working directory.
TEST(ExpandUserPathTest, StoreDirectoryIsExpanded) {
  testing::TempDir home, cwd;
  ScopedHome scoped(home.path().c_str());
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(cwd.path());
  auto store = PromptCacheStore::Open(Env::Default(), "~/store", {});
  std::filesystem::current_path(before);
  ASSERT_OK(store.status());
  EXPECT_TRUE(std::filesystem::is_directory(home.Join("store")));
  EXPECT_FALSE(std::filesystem::exists(cwd.Join("~")));
}

}  // namespace
}  // namespace kvstore
