#include "libkvstore/util/posix_compat.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>  // renameat2 (glibc)

namespace kvstore {

int SyncFileData(int fd) {
#if KVSTORE_HAVE_F_FULLFSYNC
  if (fcntl(fd, F_FULLFSYNC) == 0) return 0;
#endif
#if KVSTORE_HAVE_FDATASYNC
  return fdatasync(fd);
#else
  return fsync(fd);
#endif
}

int SyncDirectory(int fd) {
#if KVSTORE_HAVE_F_FULLFSYNC
  if (fcntl(fd, F_FULLFSYNC) == 0) return 0;
#endif
  return fsync(fd);
}

int ExchangePaths(const char* a, const char* b) {
#if KVSTORE_HAVE_RENAME_EXCHANGE
  return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
#else
  (void)a;
  (void)b;
  errno = ENOSYS;
  return -1;
#endif
}

int BeginWriteback(int fd, uint64_t offset, uint64_t length) {
#if KVSTORE_HAVE_SYNC_FILE_RANGE
  return sync_file_range(fd, static_cast<off_t>(offset), static_cast<off_t>(length),
                         SYNC_FILE_RANGE_WRITE);
#else
  (void)fd;
  (void)offset;
  (void)length;
  return 0;
#endif
}

ssize_t CopyFileRange(int in, uint64_t* in_offset, int out, size_t length) {
#if KVSTORE_HAVE_COPY_FILE_RANGE
  off_t offset = static_cast<off_t>(*in_offset);
  const ssize_t n = copy_file_range(in, &offset, out, nullptr, length, 0);
  if (n > 0) *in_offset += static_cast<uint64_t>(n);
  return n;
#else
  (void)in;
  (void)in_offset;
  (void)out;
  (void)length;
  errno = ENOSYS;
  return -1;
#endif
}

int OpenToHoldFile(const char* path) {
#if KVSTORE_HAVE_O_PATH
  return open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
#else
  // Opening a device or FIFO can block or act; only a regular file is
  // opened, and O_NONBLOCK | O_NOCTTY cover what may have taken its place
  // since the lstat.
  struct stat st;
  if (lstat(path, &st) != 0) return -1;
  if (!S_ISREG(st.st_mode)) {
    errno = EINVAL;
    return -1;
  }
  const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
#endif
}

int SuppressSigpipe(int fd) {
#if !KVSTORE_HAVE_MSG_NOSIGNAL && KVSTORE_HAVE_SO_NOSIGPIPE
  const int on = 1;
  return setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof(on));
#else
  (void)fd;
  return 0;
#endif
}

ssize_t SendMsgNoSigpipe(int fd, const msghdr* msg) {
#if KVSTORE_HAVE_MSG_NOSIGNAL
  return sendmsg(fd, msg, MSG_NOSIGNAL);
#elif KVSTORE_HAVE_SO_NOSIGPIPE
  return sendmsg(fd, msg, 0);
#else
  // A SIGPIPE raised by a write is directed at the writing thread: blocked,
  // it stays pending there, and is taken here before the mask is restored.
  // One that was pending already (blocked by the caller) is left alone.
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigemptyset(&pending);
  (void)sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  (void)pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  const ssize_t sent = sendmsg(fd, msg, 0);
  const int err = errno;
  if (sent < 0 && err == EPIPE && !was_pending) {
    sigemptyset(&pending);
    (void)sigpending(&pending);
    int sig = 0;
    if (sigismember(&pending, SIGPIPE) == 1) (void)sigwait(&pipe_only, &sig);
  }
  (void)pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return sent;
#endif
}

bool SameFileTimes(const struct stat& a, const struct stat& b) {
#if KVSTORE_HAVE_STAT_MTIM
  return a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
#elif KVSTORE_HAVE_STAT_MTIMESPEC
  return a.st_mtimespec.tv_sec == b.st_mtimespec.tv_sec &&
         a.st_mtimespec.tv_nsec == b.st_mtimespec.tv_nsec &&
         a.st_ctimespec.tv_sec == b.st_ctimespec.tv_sec &&
         a.st_ctimespec.tv_nsec == b.st_ctimespec.tv_nsec;
#else
  return a.st_mtime == b.st_mtime && a.st_ctime == b.st_ctime;
#endif
}

int64_t MtimeNs(const struct stat& st) {
#if KVSTORE_HAVE_STAT_MTIM
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
#elif KVSTORE_HAVE_STAT_MTIMESPEC
  return static_cast<int64_t>(st.st_mtimespec.tv_sec) * 1000000000 + st.st_mtimespec.tv_nsec;
#else
  return static_cast<int64_t>(st.st_mtime) * 1000000000;
#endif
}

}  // namespace kvstore
