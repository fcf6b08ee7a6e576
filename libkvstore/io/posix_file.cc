#include "libkvstore/io/posix_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "libkvstore/io/memory_file.h"
#include "libkvstore/util/posix_compat.h"

namespace kvstore {

Status PosixError(std::string_view op, const std::string& path, int err) {
  std::string msg(op);
  msg += " '";
  msg += path;
  msg += "': ";
  // std::generic_category is thread-safe, unlike strerror.
  msg += std::generic_category().message(err);
  if (err == ENOENT) return Status::NotFound(msg);
  return Status::IOError(msg);
}

ScopedFd::~ScopedFd() {
  // On Linux the descriptor is released even when close fails with EINTR,
  // so close is never retried.
  if (fd_ >= 0) close(fd_);
}

namespace {

class PosixMappedFile final : public ReadableFile {
 public:
  // Takes ownership of the mapping; `base` is null for an empty file.
  // `mapped` is what fstat said of the file when it was mapped.
  PosixMappedFile(std::string path, void* base, size_t size, const struct stat& mapped)
      : ReadableFile(std::move(path)), base_(base), size_(size), mapped_(mapped) {}
  ~PosixMappedFile() override {
    if (base_ != nullptr) munmap(base_, size_);
    if (read_fd_ >= 0) close(read_fd_);
  }
  PosixMappedFile(const PosixMappedFile&) = delete;
  PosixMappedFile& operator=(const PosixMappedFile&) = delete;

  std::span<const std::byte> data() const override {
    return {static_cast<const std::byte*>(base_), size_};
  }

  // A read-only descriptor on the file this maps when `path` still names
  // it unchanged (same device, inode, size and times), else -1: the
  // caller then reads the mapping.
  int OpenSameFile() const {
    const int fd = RetryOnEintr([&] { return open(path().c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK); });
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != mapped_.st_ino || st.st_dev != mapped_.st_dev ||
        st.st_size != mapped_.st_size || !SameFileTimes(st, mapped_)) {
      close(fd);
      return -1;
    }
    return fd;
  }

  Status ReadAt(uint64_t offset, std::span<std::byte> out) const override {
    if (offset > size_ || out.size() > size_ - offset) return ReadableFile::ReadAt(offset, out);
    // Opened on the first read only: most mapped files are never read this
    // way, and a descriptor each would not scale to a store's open entries.
    std::call_once(read_fd_opened_, [&] { read_fd_ = OpenSameFile(); });
    if (read_fd_ < 0) return ReadableFile::ReadAt(offset, out);
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = RetryOnEintr([&] { return pread(read_fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done)); });
      if (n < 0) return PosixError("read", path(), errno);
      if (n == 0) return Status::IOError("read '" + path() + "': the file shrank after it was opened");
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }

  void WillRead(uint64_t offset, uint64_t length) const override {
    if (base_ == nullptr || offset >= size_) return;
    length = std::min<uint64_t>(length, size_ - offset);
    // madvise needs a page-aligned start.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    char* p = static_cast<char*>(base_) + start;
#if KVSTORE_HAVE_MADV_POPULATE_READ
    if (madvise(p, length + (offset - start), MADV_POPULATE_READ) == 0) return;
#endif
    (void)madvise(p, length + (offset - start), MADV_WILLNEED);
  }

 private:
  void* base_;
  size_t size_;
  struct stat mapped_;
  mutable std::once_flag read_fd_opened_;
  mutable int read_fd_ = -1;  // for ReadAt: the mapped file, or -1 (read the mapping)
};

// A read-only descriptor on the regular file at `path`, or -1 (missing, not
// a regular file, unreadable).
int OpenReplacedFile(const std::string& path) {
  // Only a regular file is opened: opening a FIFO or a device can block or
  // have effects of its own. The check is repeated on what was opened.
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -1;
  }
  return fd;
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override { (void)Close(); }
  PosixWritableFile(const PosixWritableFile&) = delete;
  PosixWritableFile& operator=(const PosixWritableFile&) = delete;

  Status Append(std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(CheckUsable("append"));
    size_ += data.size();
    size_t room = kPosixWriteBuffer - buffer_.size();
    if (data.size() < kPosixWriteBuffer && data.size() <= room) {
      Buffer(data);
      return Status::OK();
    }
    if (!buffer_.empty()) {
      // Top up the buffer so that it goes out as one full write.
      Buffer(data.first(room));
      data = data.subspan(room);
      KV_RETURN_IF_ERROR(Flush());
    }
    if (data.size() >= kPosixWriteBuffer) return WriteAll(data);
    Buffer(data);
    return Status::OK();
  }

  Status AppendCopyOf(const ReadableFile& source, uint64_t offset, uint64_t length) override {
    KV_RETURN_IF_ERROR(CheckUsable("append"));
    const auto* mapped = dynamic_cast<const PosixMappedFile*>(&source);
    ScopedFd in(mapped != nullptr && kCanCopyFileRange && length >= kPosixWriteBuffer ? mapped->OpenSameFile() : -1);
    if (in.get() < 0) return WritableFile::AppendCopyOf(source, offset, length);
    KV_RETURN_IF_ERROR(Flush());
    uint64_t at = offset;
    const uint64_t end = offset + length;
    while (at < end) {
      const ssize_t n = RetryOnEintr([&] { return CopyFileRange(in.get(), &at, fd_, static_cast<size_t>(end - at)); });
      if (n < 0 && at == offset && (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP)) {
        return WritableFile::AppendCopyOf(source, offset, length);  // not between these files: through memory
      }
      if (n < 0) return Fail(PosixError("write", path_, errno));
      if (n == 0) return Fail(Status::IOError("write '" + path_ + "': " + source.path() + " ended early"));
      size_ += static_cast<uint64_t>(n);
      written_ += static_cast<uint64_t>(n);
      StartWriteback();
      ReleaseReplacedCache();
    }
    return Status::OK();
  }

  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(CheckUsable("write"));
    if (offset > size_ || data.size() > size_ - offset) {
      return Status::InvalidArgument("write '" + path_ + "': range beyond the appended bytes");
    }
    KV_RETURN_IF_ERROR(Flush());
    while (!data.empty()) {
      ssize_t n = RetryOnEintr(
          [&] { return pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset)); });
      if (n < 0) return Fail(PosixError("write", path_, errno));
      data = data.subspan(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return Status::OK();
  }

  Status Sync() override {
    KV_RETURN_IF_ERROR(CheckUsable("sync"));
    KV_RETURN_IF_ERROR(Flush());
    if (RetryOnEintr([&] { return SyncFileData(fd_); }) != 0) {
      return Fail(PosixError(kSyncFileDataCall, path_, errno));
    }
    return Status::OK();
  }

  Status Close() override {
    if (fd_ < 0) return error_;
    Status s = error_.ok() ? Flush() : error_;
    // Never retried: see ScopedFd.
    if (close(fd_) != 0 && s.ok()) s = Fail(PosixError("close", path_, errno));
    fd_ = -1;
    StopReleasingReplaced();
    buffer_.clear();
    buffer_.shrink_to_fit();
    return s;
  }

  uint64_t size() const override { return size_; }

 private:
  Status CheckUsable(std::string_view op) const {
    if (fd_ < 0) {
      return Status::FailedPrecondition(std::string(op) + " '" + path_ + "': file is closed");
    }
    return error_;
  }

  void Buffer(std::span<const std::byte> data) {
    if (buffer_.capacity() < kPosixWriteBuffer) buffer_.reserve(kPosixWriteBuffer);
    buffer_.insert(buffer_.end(), data.begin(), data.end());
  }

  Status Flush() {
    if (buffer_.empty()) return Status::OK();
    Status s = WriteAll(buffer_);
    buffer_.clear();
    return s;
  }

  Status WriteAll(std::span<const std::byte> data) {
    while (!data.empty()) {
      ssize_t n = RetryOnEintr([&] { return write(fd_, data.data(), data.size()); });
      if (n < 0) return Fail(PosixError("write", path_, errno));
      data = data.subspan(static_cast<size_t>(n));
      written_ += static_cast<uint64_t>(n);
    }
    StartWriteback();
    ReleaseReplacedCache();
    return Status::OK();
  }

  void WillNotSync() override {
    start_writeback_ = false;
    StopReleasingReplaced();
  }

  void WillReplace(const std::string& path) override {
    if (!start_writeback_ || replaced_fd_ >= 0) return;
    replaced_fd_ = OpenReplacedFile(path);
  }

  // Hands every full kPosixWritebackChunk written so far to the device
  // without waiting, so the disk works while we produce the rest and the
  // final fdatasync has little left to do. Advisory: errors surface at Sync.
  // A file that will not be synced leaves writeback to the kernel: starting
  // it would only make the writes wait for the device.
  void StartWriteback() {
    while (start_writeback_ && written_ - writeback_started_ >= kPosixWritebackChunk) {
      (void)BeginWriteback(fd_, writeback_started_, kPosixWritebackChunk);
      writeback_started_ += kPosixWritebackChunk;
    }
  }

  // Drops the replaced file's clean cached pages in every full
  // kPosixWritebackChunk this file has written over: pages that would be
  // freed only when the old file is removed, after the whole new file took
  // pages of its own. A new page costs far more than a recycled one where
  // the kernel must get it from the host (a VM whose free memory is
  // reported to its host: docs/performance.md), and under memory pressure
  // the dying file's pages are what reclaim should take first. Only files
  // that will be synced do this: on an old file's dirty pages it would
  // start their writeback, the cost WillNotSync avoids. Advisory.
  void ReleaseReplacedCache() {
#ifdef POSIX_FADV_DONTNEED
    if (replaced_fd_ < 0 || written_ - released_ < kPosixWritebackChunk) return;
    const uint64_t upto = written_ / kPosixWritebackChunk * kPosixWritebackChunk;
    (void)posix_fadvise(replaced_fd_, static_cast<off_t>(released_), static_cast<off_t>(upto - released_),
                        POSIX_FADV_DONTNEED);
    released_ = upto;
#endif
  }

  void StopReleasingReplaced() {
    if (replaced_fd_ >= 0) close(replaced_fd_);
    replaced_fd_ = -1;
  }

  // A failed write leaves the file's length and content unknown, so every
  // later call reports the first error instead of appending after a hole.
  Status Fail(Status s) {
    error_ = s;
    return s;
  }

  std::string path_;
  int fd_;
  uint64_t size_ = 0;
  uint64_t written_ = 0;             // bytes handed to write(2)
  uint64_t writeback_started_ = 0;   // prefix already given to BeginWriteback
  bool start_writeback_ = true;      // false after WillNotSync
  int replaced_fd_ = -1;             // the file this one replaces (WillReplace), or -1
  uint64_t released_ = 0;            // its prefix whose cache was released
  std::vector<std::byte> buffer_;
  Status error_;
};

}  // namespace

Result<std::shared_ptr<const ReadableFile>> OpenPosixReadable(const std::string& path) {
  ScopedFd fd(RetryOnEintr([&] { return open(path.c_str(), O_RDONLY | O_CLOEXEC); }));
  if (fd.get() < 0) return PosixError("open", path, errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) return Status::IOError("open '" + path + "': not a regular file");
  size_t size = static_cast<size_t>(st.st_size);
  void* base = nullptr;
  if (size > 0) {
    base = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (base == MAP_FAILED) return PosixError("mmap", path, errno);
  }
  return std::shared_ptr<const ReadableFile>(std::make_shared<PosixMappedFile>(path, base, size, st));
}

namespace {

// True when two fstat results describe the same, unchanged file.
bool SameFileState(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev && a.st_size == b.st_size && SameFileTimes(a, b);
}

}  // namespace

Result<std::shared_ptr<const ReadableFile>> ReadPosixIntoMemory(const std::string& path) {
  // A writer that truncates and rewrites the file in place shows up as a
  // short read, bytes past the size seen first, or a changed size or
  // modification time: read again, a bounded number of times.
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    ScopedFd fd(RetryOnEintr([&] { return open(path.c_str(), O_RDONLY | O_CLOEXEC); }));
    if (fd.get() < 0) return PosixError("open", path, errno);
    struct stat before;
    if (fstat(fd.get(), &before) != 0) return PosixError("fstat", path, errno);
    if (!S_ISREG(before.st_mode)) return Status::IOError("open '" + path + "': not a regular file");
    const size_t size = static_cast<size_t>(before.st_size);
    KV_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, AllocateFileCopy(path, size));
    size_t got = 0;
    while (got < size) {
      ssize_t n = RetryOnEintr(
          [&] { return pread(fd.get(), storage->mutable_data() + got, size - got, static_cast<off_t>(got)); });
      if (n < 0) return PosixError("read", path, errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    char past_end;
    ssize_t more = RetryOnEintr([&] { return pread(fd.get(), &past_end, 1, static_cast<off_t>(size)); });
    if (more < 0) return PosixError("read", path, errno);
    struct stat after;
    if (fstat(fd.get(), &after) != 0) return PosixError("fstat", path, errno);
    if (got == size && more == 0 && SameFileState(before, after)) {
      return std::shared_ptr<const ReadableFile>(std::make_shared<MemoryFile>(path, std::move(storage)));
    }
  }
  return Status::IOError("read '" + path + "': the file kept changing while it was read (" +
                         std::to_string(kAttempts) + " attempts); is another program rewriting it?");
}

namespace {

std::string_view FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "directory";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symbolic link";
  return "unknown file type";
}

}  // namespace

Status NotRegularFile(const std::string& path, mode_t mode, std::string_view refusal) {
  return Status::IOError(path + ": not a regular file (" + std::string(FileTypeName(mode)) + "); refusing to " +
                         std::string(refusal));
}

Result<std::unique_ptr<WritableFile>> NewPosixWritable(const std::string& path) {
  // A device or FIFO is refused before it is opened (opening one can block
  // or have effects of its own), and again after, by what was opened.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return NotRegularFile(path, st.st_mode, "write to it");
  ScopedFd fd(RetryOnEintr(
      [&] { return open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644); }));
  if (fd.get() < 0) return PosixError("open", path, errno);
  if (fstat(fd.get(), &st) != 0) return PosixError("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegularFile(path, st.st_mode, "write to it");
  // O_NONBLOCK changes nothing for a regular file; truncating only now
  // keeps a file that turned out to be something else untouched. An empty
  // file (every new temp file) is not truncated: on ext4, truncating to
  // zero marks the file for writeback at close (auto_da_alloc), which made
  // closing a 512 MiB file written without fsync take 0.08 s.
  if (st.st_size != 0 && RetryOnEintr([&] { return ftruncate(fd.get(), 0); }) != 0) {
    return PosixError("truncate", path, errno);
  }
  return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(path, fd.release()));
}

}  // namespace kvstore
