// Helpers shared by the Env tests: run a test against both the POSIX Env
// (in a fresh temp directory) and the in-memory Env, and read/write whole
// files as strings.
#ifndef KVSTORE_TESTS_ENV_TEST_UTIL_H_
#define KVSTORE_TESTS_ENV_TEST_UTIL_H_

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/env.h"
#include "libkvstore/util/platform_config.h"
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

// This process's open descriptors: the entries of /proc/self/fd where there
// is one; elsewhere (or built with KVSTORE_PORTABLE) every number below the
// descriptor limit, at most 65536, that fcntl(F_GETFD) accepts.
inline std::vector<int> OpenDescriptorList() {
  std::vector<int> fds;
#if KVSTORE_HAVE_PROC_SELF
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return fds;
  while (struct dirent* entry = readdir(d)) {
    const int fd = atoi(entry->d_name);
    if ((fd != 0 || entry->d_name == std::string_view("0")) && fd != dirfd(d)) fds.push_back(fd);
  }
  closedir(d);
#else
  const long limit = std::min(sysconf(_SC_OPEN_MAX), 65536L);
  for (int fd = 0; fd < limit; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) fds.push_back(fd);
  }
#endif
  return fds;
}

// This process's descriptors on removed regular files of the file system
// that holds `dir`.
inline int DescriptorsOfRemovedFiles(const std::string& dir) {
  // Where /proc/self/fd exists, read the links: fstat on descriptors another
  // thread may be closing (the background closes under test) is a race that
  // ThreadSanitizer reports.
  if (DIR* d = opendir("/proc/self/fd")) {
    int n = 0;
    while (struct dirent* entry = readdir(d)) {
      char target[4096];
      const std::string link = std::string("/proc/self/fd/") + entry->d_name;
      const ssize_t len = readlink(link.c_str(), target, sizeof(target) - 1);
      if (len <= 0) continue;
      const std::string_view name(target, static_cast<size_t>(len));
      if (name.starts_with(dir + "/") && name.ends_with(" (deleted)")) ++n;
    }
    closedir(d);
    return n;
  }
  struct stat where;
  if (stat(dir.c_str(), &where) != 0) return -1;
  int n = 0;
  for (int fd : OpenDescriptorList()) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0 && st.st_dev == where.st_dev) ++n;
  }
  return n;
}

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_ENV_TEST_UTIL_H_
