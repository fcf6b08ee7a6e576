// What WriteFileAtomic replaces: only a regular file (or the one a symbolic
// link names), never a device, FIFO, socket or directory; errors that name
// the output, not its temp file; and the temp files a signal handler removes.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#if __has_include(<sys/sysmacros.h>)
#include <sys/sysmacros.h>  // makedev (glibc; elsewhere sys/types.h)
#endif
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "env_test_util.h"
#include "kvstore/env.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

using Op = FaultInjectionEnv::Op;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr std::string_view kOld = "previous complete content";
constexpr std::string_view kNew = "new content";

// A node's identity and type: unchanged means not replaced.
struct Node {
  dev_t dev = 0;
  ino_t ino = 0;
  mode_t mode = 0;
  bool operator==(const Node&) const = default;
};

Node NodeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return {st.st_dev, st.st_ino, st.st_mode};
}

std::vector<std::string> Children(const std::string& dir) {
  Result<std::vector<std::string>> names = Env::Default()->GetChildren(dir);
  EXPECT_OK(names);
  return names.ok() ? *names : std::vector<std::string>{};
}

// A listening Unix socket at `path` (the descriptor is left open for the test).
bool MakeSocket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof(addr.sun_path)) return false;
  path.copy(addr.sun_path, path.size());
  return bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

class OutputKindTest : public ::testing::Test {
 protected:
  // Refused with IOError naming `path` and `kind`; the node is the same one
  // afterwards, and the directory holds nothing new.
  void ExpectRefused(const std::string& path, std::string_view kind) {
    SCOPED_TRACE(path);
    const Node before = NodeOf(path);
    const std::vector<std::string> children = Children(tmp_.path());
    Status s = WriteStringAtomic(Env::Default(), path, AsBytes(kNew));
    EXPECT_THAT(s, HasCode(StatusCode::kIOError, path));
    EXPECT_THAT(std::string(s.message()), HasSubstr(": not a regular file (" + std::string(kind) +
                                                    "); refusing to replace it"));
    EXPECT_EQ(NodeOf(path), before);
    EXPECT_EQ(Children(tmp_.path()), children);
  }

  TempDir tmp_;
};

TEST_F(OutputKindTest, FifoSocketAndDirectoryAreRefused) {
  const std::string fifo = tmp_.Join("fifo"), sock = tmp_.Join("sock"), dir = tmp_.Join("dir");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(MakeSocket(sock));
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ExpectRefused(fifo, "FIFO");  // without the check: opening it for writing blocks for good
  ExpectRefused(sock, "socket");
  ExpectRefused(dir, "directory");
}

// Device nodes of our own (like /dev/null and /dev/full): the real ones must
// not be risked by a test. Creating one needs CAP_MKNOD.
TEST_F(OutputKindTest, DevicesAreRefused) {
  const std::string null_dev = tmp_.Join("null"), full_dev = tmp_.Join("full"),
                    loop = tmp_.Join("loop");
  if (mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod: " << std::strerror(errno)
                 << " (needs CAP_MKNOD; the FIFO case covers the check)";
  }
  ASSERT_EQ(mknod(full_dev.c_str(), S_IFCHR | 0666, makedev(1, 7)), 0);
  ASSERT_EQ(mknod(loop.c_str(), S_IFBLK | 0600, makedev(7, 0)), 0);
  ExpectRefused(null_dev, "character device");
  ExpectRefused(full_dev, "character device");
  ExpectRefused(loop, "block device");
}

TEST_F(OutputKindTest, NewWritableFileRefusesWithoutOpening) {
  const std::string fifo = tmp_.Join("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(
      Env::Default()->NewWritableFile(fifo),
      HasCode(StatusCode::kIOError, fifo + ": not a regular file (FIFO); refusing to write to it"));
}

// A link to a regular file: the file it names is replaced in its own
// directory, and the link stays.
TEST_F(OutputKindTest, SymlinkToRegularFileIsFollowed) {
  const std::string real_dir = tmp_.Join("real"), link_dir = tmp_.Join("links");
  ASSERT_EQ(mkdir(real_dir.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(link_dir.c_str(), 0700), 0);
  ASSERT_OK(WriteString(Env::Default(), real_dir + "/out", kOld));
  const std::string link = link_dir + "/out";
  ASSERT_EQ(symlink("../real/out", link.c_str()), 0);
  ASSERT_OK(WriteStringAtomic(Env::Default(), link, AsBytes(kNew)));
  EXPECT_TRUE(S_ISLNK(NodeOf(link).mode));
  EXPECT_EQ(ReadString(Env::Default(), real_dir + "/out").value(), kNew);
  EXPECT_THAT(Children(link_dir), ElementsAre("out"));
  EXPECT_THAT(Children(real_dir), ElementsAre("out"));
}

TEST_F(OutputKindTest, DanglingSymlinkAndSymlinkToFifoAreRefused) {
  const std::string dangling = tmp_.Join("dangling"), to_fifo = tmp_.Join("to-fifo");
  ASSERT_EQ(symlink("missing", dangling.c_str()), 0);
  ASSERT_EQ(mkfifo(tmp_.Join("fifo").c_str(), 0600), 0);
  ASSERT_EQ(symlink("fifo", to_fifo.c_str()), 0);
  EXPECT_THAT(WriteStringAtomic(Env::Default(), dangling, AsBytes(kNew)),
              HasCode(StatusCode::kIOError, dangling + ": a symbolic link to a missing file"));
  EXPECT_THAT(
      WriteStringAtomic(Env::Default(), to_fifo, AsBytes(kNew)),
      HasCode(StatusCode::kIOError, to_fifo + " (a symbolic link): not a regular file (FIFO)"));
  EXPECT_THAT(Children(tmp_.path()), UnorderedElementsAre("dangling", "fifo", "to-fifo"));
}

// Errors of the temp file are reported about the output: it is what the
// caller named, and the temp file no longer exists when they see the error.
class OutputErrorTest : public EnvKindTest {};

TEST_P(OutputErrorTest, NoSpaceNamesTheOutputAndLeavesItAsItWas) {
  const std::string out = Path("out");
  ASSERT_OK(WriteStringAtomic(env(), out, AsBytes(kOld)));
  struct Case {
    Op op;
    std::string message;
  } cases[] = {
      {Op::kAppend, "write '" + out + "': No space left on device"},
      {Op::kSync, "fdatasync '" + out + "': No space left on device"},
      {Op::kNewWritable, "open '" + out + "': No space left on device"},
      {Op::kRename, "replace '" + out + "': No space left on device"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    FaultInjectionEnv fault(env());
    fault.FailNthWithErrno(c.op, 1, ENOSPC);
    Status s = WriteStringAtomic(&fault, out, AsBytes(kNew));
    EXPECT_THAT(s, HasCode(StatusCode::kIOError, c.message));
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr(".kvtmp-")));
    EXPECT_THAT(env()->GetChildren(root()).value(), ElementsAre("out"));
    EXPECT_EQ(ReadString(env(), out).value(), kOld);
  }
}

INSTANTIATE_TEST_SUITE_P(Envs, OutputErrorTest, ::testing::Values(EnvKind::kPosix, EnvKind::kMem),
                         EnvKindName);

TEST(MemEnvOutputTest, DirectoryIsRefused) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK(env->CreateDir("/d/sub"));
  EXPECT_THAT(WriteStringAtomic(env.get(), "/d/sub", AsBytes(kNew)),
              HasCode(StatusCode::kIOError,
                      "/d/sub: not a regular file (directory); refusing to replace it"));
}

// The temp file of a write in progress: registered while it exists, removed
// by RemoveTempFilesInProgress (what a signal handler calls), after which
// the write fails and the output is as it was.
TEST(TempFilesInProgressTest, RemovedOnRequestAndWriteFails) {
  TempDir tmp;
  const std::string out = tmp.Join("out");
  ASSERT_OK(WriteString(Env::Default(), out, kOld));
  int removed = -1;
  std::vector<std::string> during, after_removal;
  Status s = WriteFileAtomic(Env::Default(), out, [&](WritableFile& file) {
    KV_RETURN_IF_ERROR(file.Append(AsBytes(kNew)));
    during = Children(tmp.path());
    removed = RemoveTempFilesInProgress();
    after_removal = Children(tmp.path());
    return Status::OK();
  });
  EXPECT_EQ(during.size(), 2u);
  EXPECT_EQ(removed, 1);
  EXPECT_THAT(after_removal, ElementsAre("out"));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(ReadString(Env::Default(), out).value(), kOld);
  EXPECT_EQ(RemoveTempFilesInProgress(), 0);  // nothing in progress
}

// The same from a real signal handler, as kvtool installs one: the process
// dies of the signal and leaves only the old output.
TEST(TempFilesInProgressTest, SignalHandlerLeavesNoTempFile) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer runs the handler of a raised signal at its next intercepted call, after the rename";
#endif
  TempDir tmp;
  const std::string out = tmp.Join("out");
  ASSERT_OK(WriteString(Env::Default(), out, kOld));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(
        SIGTERM, +[](int sig) {
          RemoveTempFilesInProgress();
          signal(sig, SIG_DFL);
          raise(sig);
        });
    (void)WriteFileAtomic(Env::Default(), out, [&](WritableFile& file) {
      (void)file.Append(AsBytes(kNew));
      raise(SIGTERM);
      return Status::OK();
    });
    _exit(0);  // not reached: the handler ends the process
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_THAT(Children(tmp.path()), ElementsAre("out"));
  EXPECT_EQ(ReadString(Env::Default(), out).value(), kOld);
}

}  // namespace
}  // namespace kvstore::testing
