// Internal pieces of the POSIX Env: errno to Status, and the file classes
// behind Env::Default()'s OpenReadable and NewWritableFile.
#ifndef KVSTORE_LIBKVSTORE_IO_POSIX_FILE_H_
#define KVSTORE_LIBKVSTORE_IO_POSIX_FILE_H_

#include <sys/types.h>

#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "kvstore/env.h"
#include "kvstore/status.h"

namespace kvstore {

// "<op> '<path>': <strerror(err)>": NotFound for ENOENT, IOError otherwise
// (ENOSPC, EIO, EACCES, ...).
Status PosixError(std::string_view op, const std::string& path, int err);

// Calls `fn` until it does not fail with EINTR; returns its last result.
template <typename Fn>
auto RetryOnEintr(Fn&& fn) -> decltype(fn()) {
  decltype(fn()) r;
  do {
    r = fn();
  } while (r == -1 && errno == EINTR);
  return r;
}

// Owns a file descriptor: closes it on destruction unless released.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// The whole file, mapped read-only (MAP_PRIVATE); an empty file is not
// mapped. Errors: NotFound, IOError (also for a directory or other
// non-regular file).
Result<std::shared_ptr<const ReadableFile>> OpenPosixReadable(const std::string& path);

// The whole file read with pread into private memory, checked not to have
// changed meanwhile (Env::ReadIntoMemory).
Result<std::shared_ptr<const ReadableFile>> ReadPosixIntoMemory(const std::string& path);

// "<path>: not a regular file (character device); refusing to <refusal>":
// IOError for an output path that is a directory, device, FIFO or socket.
Status NotRegularFile(const std::string& path, mode_t mode, std::string_view refusal);

// Creates or truncates `path` (mode 0644 before umask); IOError, without
// opening it, when `path` exists and is not a regular file. Appends are gathered
// in a user-space buffer of kPosixWriteBuffer bytes; an append that does not
// fit is written straight through once the buffer is flushed.
inline constexpr size_t kPosixWriteBuffer = size_t{1} << 20;
// Writeback of written data is started (not awaited) every this many bytes.
inline constexpr size_t kPosixWritebackChunk = size_t{8} << 20;
Result<std::unique_ptr<WritableFile>> NewPosixWritable(const std::string& path);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_IO_POSIX_FILE_H_
