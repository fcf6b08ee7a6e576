// POSIX-only behaviour of Env::Default(): error mapping, mmap, descriptors
// and locks across processes.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <climits>
#include <cstdlib>
#include <functional>
#include <string>

#include "env_test_util.h"
#include "kvstore/env.h"
#include "libkvstore/io/posix_file.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

// Runs `child` in a forked process and returns its exit code (or -1).
// `child` must not use gtest assertions; it returns the code to exit with.
int RunInChild(const std::function<int()>& child) {
  pid_t pid = fork();
  if (pid == 0) _exit(child());
  if (pid < 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// The descriptor flags of this process's open descriptor on the file
// `path` names, or -1.
int DescriptorFlagsFor(const std::string& path) {
  struct stat file;
  if (stat(path.c_str(), &file) != 0) return -1;
  for (int fd : OpenDescriptorList()) {
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_dev == file.st_dev && st.st_ino == file.st_ino) return fcntl(fd, F_GETFD);
  }
  return -1;
}

TEST(PosixErrorTest, MapsErrnoToCodeWithPathAndReason) {
  EXPECT_THAT(PosixError("open", "/x/y", ENOENT),
              HasCode(StatusCode::kNotFound, "open '/x/y': No such file or directory"));
  EXPECT_THAT(PosixError("write", "/x/y", ENOSPC),
              HasCode(StatusCode::kIOError, "write '/x/y': No space left on device"));
  EXPECT_THAT(PosixError("fdatasync", "/x/y", EIO),
              HasCode(StatusCode::kIOError, "fdatasync '/x/y': Input/output error"));
  EXPECT_THAT(PosixError("open", "/x/y", EACCES), HasCode(StatusCode::kIOError, "/x/y"));
}

// A device is never opened for writing (WriteFileAtomic would replace it;
// opening a FIFO would block): refused, naming it.
TEST(PosixEnvTest, DeviceFullIsRefusedNamingThePath) {
  if (access("/dev/full", F_OK) != 0) GTEST_SKIP() << "no /dev/full";
  EXPECT_THAT(Env::Default()->NewWritableFile("/dev/full"),
              HasCode(StatusCode::kIOError, "/dev/full: not a regular file (character device); refusing to write to it"));
}

// A write the system refuses (here: over the file-size limit, SIGXFSZ
// ignored, EFBIG) is IOError naming the file, and the first error sticks.
TEST(PosixEnvTest, RefusedWriteIsIOErrorNamingThePathAndSticks) {
  TempDir tmp;
  const std::string path = tmp.Join("limited");
  EXPECT_EQ(RunInChild([&] {
              signal(SIGXFSZ, SIG_IGN);
              rlimit limit{4096, 4096};
              if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 10;
              auto file = Env::Default()->NewWritableFile(path);
              if (!file.ok() || !(*file)->Append(AsBytes(std::string(8192, 'x'))).ok()) return 11;
              Status sync = (*file)->Sync();
              if (sync.ToString() != "IOError: write '" + path + "': File too large") return 12;
              if ((*file)->Append(AsBytes("more")).ToString() != sync.ToString()) return 13;
              if ((*file)->Close().ToString() != sync.ToString()) return 14;
              auto direct = Env::Default()->NewWritableFile(path);
              std::string large(kPosixWriteBuffer, 'x');
              if (!direct.ok() || (*direct)->Append(AsBytes(large)).message().find(path) == std::string_view::npos) {
                return 15;
              }
              return 0;
            }),
            0);
}

TEST(PosixEnvTest, OpenDirectoryOrMissingParent) {
  TempDir tmp;
  Env* env = Env::Default();
  EXPECT_THAT(env->OpenReadable(tmp.path()), HasCode(StatusCode::kIOError, "not a regular file"));
  std::string orphan = tmp.Join("no/such/dir/f");
  EXPECT_THAT(env->NewWritableFile(orphan), HasCode(StatusCode::kNotFound, orphan));
  EXPECT_THAT(env->SyncDir(tmp.Join("none")), HasCode(StatusCode::kNotFound, tmp.Join("none")));
}

TEST(PosixEnvTest, ReadIsAMappingOfTheFile) {
  TempDir tmp;
  std::string path = tmp.Join("f");
  ASSERT_OK(WriteString(Env::Default(), path, "mapped bytes"));
  ASSERT_OK_AND_ASSIGN(auto file, Env::Default()->OpenReadable(path));
  // The descriptor is closed after mapping; the mapping shows the file.
  EXPECT_EQ(DescriptorFlagsFor(path), -1);
  EXPECT_EQ(ToString(file->data()), "mapped bytes");
}

TEST(PosixEnvTest, DescriptorsAreCloseOnExec) {
  TempDir tmp;
  std::string path = tmp.Join("f");
  ASSERT_OK_AND_ASSIGN(auto file, Env::Default()->NewWritableFile(path));
  int flags = DescriptorFlagsFor(path);
  ASSERT_NE(flags, -1);
  EXPECT_TRUE(flags & FD_CLOEXEC);

  std::string lock_path = tmp.Join("LOCK");
  ASSERT_OK_AND_ASSIGN(auto lock, Env::Default()->LockFile(lock_path));
  flags = DescriptorFlagsFor(lock_path);
  ASSERT_NE(flags, -1);
  EXPECT_TRUE(flags & FD_CLOEXEC);
}

TEST(PosixEnvTest, AsStorageKeepsTheMappingAlive) {
  TempDir tmp;
  std::string path = tmp.Join("f");
  ASSERT_OK(WriteString(Env::Default(), path, "tensor bytes"));
  std::shared_ptr<Storage> storage;
  const std::byte* mapped = nullptr;
  {
    ASSERT_OK_AND_ASSIGN(auto file, Env::Default()->OpenReadable(path));
    storage = file->AsStorage();
    mapped = file->data().data();
  }
  ASSERT_OK(Env::Default()->RemoveFile(path));
  ASSERT_NE(storage, nullptr);
  EXPECT_FALSE(storage->writable());
  EXPECT_EQ(storage->data(), mapped);
  EXPECT_EQ(ToString({storage->data(), storage->size()}), "tensor bytes");
}

TEST(PosixEnvTest, LockSeesOtherSpellingOfSamePath) {
  TempDir tmp;
  ASSERT_OK_AND_ASSIGN(auto lock, Env::Default()->LockFile(tmp.Join("LOCK")));
  EXPECT_THAT(Env::Default()->LockFile(tmp.path() + "/./LOCK"),
              HasCode(StatusCode::kFailedPrecondition, "already held by this process"));
}

TEST(PosixEnvTest, LockExcludesAnotherProcess) {
  TempDir tmp;
  std::string path = tmp.Join("LOCK");
  auto try_lock_in_child = [&] {
    Result<std::unique_ptr<FileLock>> lock = Env::Default()->LockFile(path);
    if (lock.ok()) return 0;
    bool other = lock.status().code() == StatusCode::kFailedPrecondition &&
                 lock.status().message().find("held by another process") != std::string::npos;
    return other ? 1 : 2;
  };
  {
    ASSERT_OK_AND_ASSIGN(auto lock, Env::Default()->LockFile(path));
    EXPECT_EQ(RunInChild(try_lock_in_child), 1);
  }
  EXPECT_EQ(RunInChild(try_lock_in_child), 0);
  // A lock held by a child is released when the child dies, even unclean.
  EXPECT_EQ(RunInChild([&] {
              auto lock = Env::Default()->LockFile(path);
              if (!lock.ok()) return 1;
              _exit(0);  // no destructors run
            }),
            0);
  EXPECT_OK(Env::Default()->LockFile(path));
}

// RenameFile exchanges the two names and then removes the old file (its
// teardown in the background): to everyone else that is rename(2). The
// target holds the new bytes, the source name is gone, and the old file
// lives on for whoever holds it (a mapping, another hard link).
TEST(PosixEnvTest, RenameReplacesWhileTheOldFileLivesOnForItsHolders) {
  TempDir tmp;
  Env* env = Env::Default();
  const std::string to = tmp.Join("to"), from = tmp.Join("from"), second_name = tmp.Join("second-name");
  ASSERT_OK(WriteString(env, to, "old bytes"));
  ASSERT_EQ(link(to.c_str(), second_name.c_str()), 0);
  ASSERT_OK_AND_ASSIGN(auto mapped, env->OpenReadable(to));
  ASSERT_OK(WriteString(env, from, "new bytes"));

  ASSERT_OK(env->RenameFile(from, to));
  EXPECT_EQ(ReadString(env, to).value(), "new bytes");
  EXPECT_FALSE(env->FileExists(from));
  EXPECT_EQ(ToString(mapped->data()), "old bytes");
  EXPECT_EQ(ReadString(env, second_name).value(), "old bytes");
  EXPECT_THAT(env->GetChildren(tmp.path()).value(), ::testing::UnorderedElementsAre("to", "second-name"));
  // Nothing at the target: a plain rename.
  ASSERT_OK(env->RenameFile(to, tmp.Join("fresh")));
  EXPECT_EQ(ReadString(env, tmp.Join("fresh")).value(), "new bytes");
  EXPECT_THAT(env->RenameFile(to, tmp.Join("fresh")), HasCode(StatusCode::kNotFound, to));
}

// A FIFO or a directory that took the target's place after WriteFileAtomic
// checked it (ReplaceTarget) is not replaced: refused, both left as they were.
TEST(PosixEnvTest, RenameRefusesToReplaceWhatIsNotARegularFile) {
  TempDir tmp;
  Env* env = Env::Default();
  const std::string fifo = tmp.Join("fifo"), dir = tmp.Join("dir"), from = tmp.Join("from");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_OK(env->CreateDir(dir));
  ASSERT_OK(WriteString(env, dir + "/inside", "kept"));
  ASSERT_OK(WriteString(env, from, "new bytes"));

  EXPECT_THAT(env->RenameFile(from, fifo),
              HasCode(StatusCode::kIOError, fifo + ": not a regular file (FIFO); refusing to replace it"));
  EXPECT_THAT(env->RenameFile(from, dir),
              HasCode(StatusCode::kIOError, dir + ": not a regular file (directory); refusing to replace it"));
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(ReadString(env, dir + "/inside").value(), "kept");
  EXPECT_EQ(ReadString(env, from).value(), "new bytes");
}

// RemoveFile of a FIFO (opened for nothing: the removal must not block) and
// of a missing file.
TEST(PosixEnvTest, RemoveFileTakesAnyNameAndNamesWhatIsMissing) {
  TempDir tmp;
  const std::string fifo = tmp.Join("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_OK(Env::Default()->RemoveFile(fifo));
  EXPECT_FALSE(Env::Default()->FileExists(fifo));
  EXPECT_THAT(Env::Default()->RemoveFile(fifo), HasCode(StatusCode::kNotFound, fifo));
}

// A writable file opened on an existing file starts empty (new temp files,
// already empty, are not truncated: see NewPosixWritable).
TEST(PosixEnvTest, NewWritableFileEmptiesAnExistingFile) {
  TempDir tmp;
  const std::string path = tmp.Join("f");
  ASSERT_OK(WriteString(Env::Default(), path, "a longer old content"));
  ASSERT_OK(WriteString(Env::Default(), path, "new"));
  EXPECT_EQ(ReadString(Env::Default(), path).value(), "new");
}

}  // namespace
}  // namespace kvstore::testing

namespace kvstore::testing {
namespace {

std::vector<std::byte> Pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte(static_cast<uint8_t>(i * 31 + seed));
  return out;
}

// AppendToFile writes only to a regular file at `path` itself: a FIFO (which
// would block) and a symbolic link (which would lead elsewhere) are refused
// and left as they were.
TEST(PosixEnvTest, AppendToFileRefusesWhatIsNotARegularFile) {
  TempDir tmp;
  Env* env = Env::Default();
  const std::string fifo = tmp.Join("fifo"), target = tmp.Join("target"), link = tmp.Join("link");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(env->AppendToFile(fifo, AsBytes("x"), false).code(), StatusCode::kIOError);
  ASSERT_OK(WriteString(env, target, "kept"));
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(env->AppendToFile(link, AsBytes("x"), false).code(), StatusCode::kIOError);
  EXPECT_EQ(ReadString(env, target).value(), "kept");
}

// AppendCopyOf copies a range of a mapped file (in the kernel where it
// can), after what was appended before; a file replaced since it was
// mapped is copied from the mapping, so the copy is always what was mapped.
TEST(PosixEnvTest, ReadAtOfAShrunkFileIsAnErrorNotAFault) {
  TempDir tmp;
  const std::string path = tmp.Join("f");
  ASSERT_OK(WriteString(Env::Default(), path, std::string(3 * 4096, 'k')));
  ASSERT_OK_AND_ASSIGN(auto file, Env::Default()->OpenReadable(path));
  std::string got(4096, '\0');
  ASSERT_OK(file->ReadAt(2 * 4096, std::as_writable_bytes(std::span(got))));
  EXPECT_EQ(got, std::string(4096, 'k'));
  // Truncated in place (a touch of the mapping's last page would now raise SIGBUS).
  ASSERT_EQ(truncate(path.c_str(), 100), 0);
  EXPECT_THAT(file->ReadAt(2 * 4096, std::as_writable_bytes(std::span(got))),
              HasCode(StatusCode::kIOError, "shrank"));
}

TEST(PosixEnvTest, AppendCopyOfCopiesWhatWasMapped) {
  TempDir tmp;
  Env* env = Env::Default();
  const std::vector<std::byte> old_bytes = Pattern(3 << 20, 1), new_bytes = Pattern(3 << 20, 2);
  ASSERT_OK(WriteStringAtomic(env, tmp.Join("src"), old_bytes));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const ReadableFile> src, env->OpenReadable(tmp.Join("src")));
  for (bool replaced : {false, true}) {
    if (replaced) {
      ASSERT_OK(WriteStringAtomic(env, tmp.Join("src"), new_bytes));
    }
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> out, env->NewWritableFile(tmp.Join("out")));
    ASSERT_OK(out->Append(std::span(old_bytes).first(5)));
    ASSERT_OK(out->AppendCopyOf(*src, 100, (2 << 20) + 7));
    ASSERT_OK(out->AppendCopyOf(*src, 0, 3));  // small: through memory
    EXPECT_EQ(out->size(), 5u + (2 << 20) + 7 + 3);
    ASSERT_OK(out->Close());
    std::vector<std::byte> want(old_bytes.begin(), old_bytes.begin() + 5);
    want.insert(want.end(), old_bytes.begin() + 100, old_bytes.begin() + 100 + (2 << 20) + 7);
    want.insert(want.end(), old_bytes.begin(), old_bytes.begin() + 3);
    EXPECT_TRUE(ReadFileBytes(tmp.Join("out")) == want) << (replaced ? "replaced source" : "source");
  }
}

}  // namespace
}  // namespace kvstore::testing
