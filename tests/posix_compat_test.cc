// The calls that differ between Linux and other POSIX systems, as this
// build has them: the Linux-only ones, or their POSIX fallbacks when built
// with KVSTORE_PORTABLE=ON (CI's sanitizer build). Each test holds for both.
#include "libkvstore/util/posix_compat.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "env_test_util.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[64];
  ssize_t n;
  while ((n = pread(fd, buf, sizeof(buf), static_cast<off_t>(out.size()))) > 0) {
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(PosixCompatTest, SyncsAFileAndADirectoryAndReportsABadDescriptor) {
  TempDir tmp;
  const std::string path = tmp.Join("f");
  ASSERT_OK(WriteString(Env::Default(), path, "data"));
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(SyncFileData(fd), 0);
  EXPECT_EQ(BeginWriteback(fd, 0, 4), 0);
  close(fd);
  const int dir = open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  EXPECT_EQ(SyncDirectory(dir), 0);
  close(dir);
  errno = 0;
  EXPECT_EQ(SyncFileData(fd), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(SyncDirectory(fd), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_TRUE(kSyncFileDataCall == "fdatasync" || kSyncFileDataCall == "fsync");
}

// Swapped where the system can, refused with ENOSYS (and nothing changed)
// where it cannot.
TEST(PosixCompatTest, ExchangesTwoNamesOrSaysItCannot) {
  TempDir tmp;
  const std::string a = tmp.Join("a"), b = tmp.Join("b");
  ASSERT_OK(WriteString(Env::Default(), a, "A"));
  ASSERT_OK(WriteString(Env::Default(), b, "B"));
  if (kCanExchangePaths) {
    ASSERT_EQ(ExchangePaths(a.c_str(), b.c_str()), 0);
    EXPECT_EQ(ReadString(Env::Default(), a).value(), "B");
    EXPECT_EQ(ReadString(Env::Default(), b).value(), "A");
  } else {
    errno = 0;
    EXPECT_EQ(ExchangePaths(a.c_str(), b.c_str()), -1);
    EXPECT_EQ(errno, ENOSYS);
    EXPECT_EQ(ReadString(Env::Default(), a).value(), "A");
    EXPECT_EQ(ReadString(Env::Default(), b).value(), "B");
  }
}

TEST(PosixCompatTest, CopiesAFileRangeOrSaysItCannot) {
  TempDir tmp;
  const std::string in = tmp.Join("in"), out = tmp.Join("out");
  ASSERT_OK(WriteString(Env::Default(), in, "0123456789"));
  const int src = open(in.c_str(), O_RDONLY | O_CLOEXEC);
  const int dst = open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(src, 0);
  ASSERT_GE(dst, 0);
  uint64_t offset = 3;
  errno = 0;
  const ssize_t n = CopyFileRange(src, &offset, dst, 4);
  close(src);
  close(dst);
  if (kCanCopyFileRange) {
    ASSERT_EQ(n, 4);
    EXPECT_EQ(offset, 7u);
    EXPECT_EQ(ReadString(Env::Default(), out).value(), "3456");
  } else {
    EXPECT_EQ(n, -1);
    EXPECT_EQ(errno, ENOSYS);
    EXPECT_EQ(offset, 3u);
  }
}

// The descriptor keeps a removed file's bytes; a symbolic link is not
// followed (O_PATH holds the link, the fallback nothing); a FIFO does not
// block the call (a plain open would wait for a writer).
TEST(PosixCompatTest, HoldsARemovedFileButNeverBlocksOrFollowsALink) {
  TempDir tmp;
  const std::string path = tmp.Join("f"), link_name = tmp.Join("l"), fifo = tmp.Join("p");
  ASSERT_OK(WriteString(Env::Default(), path, "kept"));
  const int fd = OpenToHoldFile(path.c_str());
  ASSERT_GE(fd, 0);
  EXPECT_EQ(FD_CLOEXEC, fcntl(fd, F_GETFD) & FD_CLOEXEC);
  ASSERT_EQ(unlink(path.c_str()), 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  EXPECT_EQ(st.st_size, 4);
  if (!KVSTORE_HAVE_O_PATH) {
    EXPECT_EQ(ReadAll(fd), "kept");  // an O_PATH descriptor cannot read
  }
  close(fd);

  ASSERT_OK(WriteString(Env::Default(), path, "target"));
  ASSERT_EQ(symlink(path.c_str(), link_name.c_str()), 0);
  const int on_link = OpenToHoldFile(link_name.c_str());  // O_PATH holds the link itself
  if (on_link >= 0) {
    ASSERT_EQ(fstat(on_link, &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    close(on_link);
  }

  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int held = OpenToHoldFile(fifo.c_str());  // returns: the test would hang otherwise
  if (held >= 0) close(held);
  EXPECT_EQ(OpenToHoldFile(tmp.Join("missing").c_str()), -1);
}

bool SigpipePending() {
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}

bool SigpipeBlocked() {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

// Sends "x" on a socket whose peer has closed.
ssize_t SendToClosedPeer(int& err) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return -2;
  close(fds[1]);
  if (SuppressSigpipe(fds[0]) != 0) return -3;
  char byte = 'x';
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  const ssize_t sent = SendMsgNoSigpipe(fds[0], &msg);
  err = errno;
  close(fds[0]);
  return sent;
}

// With SIGPIPE's default action (terminate), a send to a closed peer is
// EPIPE for the call: the process lives, the thread's mask is as it was, and
// no SIGPIPE is left pending for later.
TEST(PosixCompatTest, SendToAClosedPeerIsEpipeNotASignal) {
  struct sigaction dfl = {}, old = {};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(sigaction(SIGPIPE, &dfl, &old), 0);
  ASSERT_FALSE(SigpipeBlocked());
  int err = 0;
  EXPECT_EQ(SendToClosedPeer(err), -1);
  EXPECT_EQ(err, EPIPE);
  EXPECT_FALSE(SigpipeBlocked());
  EXPECT_FALSE(SigpipePending());
  sigaction(SIGPIPE, &old, nullptr);
}

// A SIGPIPE the caller holds blocked and pending is its own: still pending
// after the call, and still blocked.
TEST(PosixCompatTest, SendLeavesTheCallersPendingSigpipe) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &pipe_only, &old), 0);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGPIPE), 0);
  ASSERT_TRUE(SigpipePending());
  int err = 0;
  EXPECT_EQ(SendToClosedPeer(err), -1);
  EXPECT_EQ(err, EPIPE);
  EXPECT_TRUE(SigpipeBlocked());
  EXPECT_TRUE(SigpipePending());
  int sig = 0;
  ASSERT_EQ(sigwait(&pipe_only, &sig), 0);
  EXPECT_EQ(sig, SIGPIPE);
  EXPECT_FALSE(SigpipePending());
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

TEST(PosixCompatTest, FileTimesCompareModificationAndChange) {
  TempDir tmp;
  const std::string path = tmp.Join("f");
  ASSERT_OK(WriteString(Env::Default(), path, "data"));
  struct stat a, b;
  ASSERT_EQ(stat(path.c_str(), &a), 0);
  b = a;
  EXPECT_TRUE(SameFileTimes(a, b));
  const timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  ASSERT_EQ(stat(path.c_str(), &b), 0);
  EXPECT_FALSE(SameFileTimes(a, b));
}

}  // namespace
}  // namespace kvstore::testing
