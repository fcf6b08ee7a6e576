#include "kvstore/user_path.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace kvstore {

namespace {

// The home directory of the passwd entry getpw*_r finds, or "" when none.
template <typename Lookup>
std::string HomeFromPasswd(Lookup lookup) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd entry;
  struct passwd* found = nullptr;
  if (lookup(&entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr || found->pw_dir == nullptr) {
    return "";
  }
  return found->pw_dir;
}

}  // namespace

Result<std::string> ExpandUserPath(std::string_view path) {
  if (path.empty() || path[0] != '~') return std::string(path);
  const size_t slash = path.find('/');
  const std::string_view user = path.substr(1, slash == std::string_view::npos ? path.size() - 1 : slash - 1);
  const std::string_view rest = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  std::string home;
  if (user.empty()) {
    const char* env = std::getenv("HOME");
    home = env != nullptr ? env : "";
    if (home.empty()) {
      home = HomeFromPasswd([](struct passwd* e, char* b, size_t n, struct passwd** r) {
        return getpwuid_r(getuid(), e, b, n, r);
      });
    }
    if (home.empty()) {
      return Status::InvalidArgument("cannot expand '~' in \"" + std::string(path) +
                                     "\": $HOME is not set and the user has no home directory");
    }
  } else {
    const std::string name(user);
    home = HomeFromPasswd([&name](struct passwd* e, char* b, size_t n, struct passwd** r) {
      return getpwnam_r(name.c_str(), e, b, n, r);
    });
    if (home.empty()) {
      return Status::InvalidArgument("cannot expand \"~" + name + "\" in \"" + std::string(path) + "\": no user \"" +
                                     name + "\" with a home directory");
    }
  }
  // "~/" with HOME=/ gives "/", not "//".
  if (!rest.empty() && home.size() > 1 && home.back() == '/') home.pop_back();
  if (home == "/" && !rest.empty()) return std::string(rest);
  return home + std::string(rest);
}

}  // namespace kvstore
