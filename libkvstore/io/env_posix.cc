#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>

#include "kvstore/env.h"
#include "libkvstore/io/posix_file.h"
#include "libkvstore/util/posix_compat.h"
#include "libkvstore/util/task_pool.h"

namespace kvstore {
namespace {

// flock() alone does not exclude a second lock taken through another
// descriptor in the same process on every file system (NFS emulates it with
// per-process fcntl locks), so the Env also tracks the files it has locked,
// by inode so that two spellings of one path are one lock. The owner pid
// makes entries inherited by a forked child count as another process's.
class LockTable {
 public:
  using Key = std::pair<dev_t, ino_t>;

  std::mutex& mu() { return mu_; }
  // REQUIRES: mu() held.
  bool HeldHere(const Key& key) const {
    auto it = owners_.find(key);
    return it != owners_.end() && it->second == getpid();
  }
  void Add(const Key& key) { owners_[key] = getpid(); }
  void Remove(const Key& key) { owners_.erase(key); }

 private:
  std::mutex mu_;
  std::map<Key, pid_t> owners_;
};

LockTable& Locks() {
  static auto* table = new LockTable;
  return *table;
}

class PosixFileLock final : public FileLock {
 public:
  PosixFileLock(int fd, LockTable::Key key) : fd_(fd), key_(key) {}
  ~PosixFileLock() override {
    // Closing under the table mutex keeps a concurrent LockFile in this
    // process from seeing the table entry gone while the flock still holds.
    std::lock_guard<std::mutex> guard(Locks().mu());
    close(fd_);
    Locks().Remove(key_);
  }
  PosixFileLock(const PosixFileLock&) = delete;
  PosixFileLock& operator=(const PosixFileLock&) = delete;

 private:
  int fd_;
  LockTable::Key key_;
};

Status SyncPath(const std::string& dir) {
  ScopedFd fd(RetryOnEintr([&] { return open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }));
  if (fd.get() < 0) return PosixError("open directory", dir, errno);
  // EINVAL: the file system cannot sync directories; there is nothing more
  // to make durable through this descriptor.
  if (RetryOnEintr([&] { return SyncDirectory(fd.get()); }) != 0 && errno != EINVAL) {
    return PosixError("fsync directory", dir, errno);
  }
  return Status::OK();
}

Status MakeDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) == 0) return Status::OK();
  int err = errno;
  struct stat st;
  if (err == EEXIST && stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::OK();
    return Status::IOError("create directory '" + dir + "': exists and is not a directory");
  }
  return PosixError("create directory", dir, err);
}

// Closing the last reference to a removed file frees its page cache and
// blocks, which costs about as much as writing it did (0.16 s per 512 MiB
// on the 2-core VM of docs/performance.md). A pool worker does that, so the
// call that replaced or removed the file returns without waiting for it.
// While the workers are busy the descriptors wait in a fixed table, each one
// counting against the process's descriptor limit and keeping its file's
// blocks allocated: with every slot taken, the caller closes. The table,
// unlike the pool's queue, is visible to the child of a fork(), which
// inherits the descriptors but not the tasks that would close them: the
// child closes them at once (pthread_atfork), so that it does not hold the
// removed files' blocks for as long as it lives.
constexpr int kMaxDeferredCloses = 32;

struct DeferredCloses {
  std::atomic<int> fds[kMaxDeferredCloses];
  DeferredCloses() {
    for (std::atomic<int>& fd : fds) fd.store(-1);
    pthread_atfork(nullptr, nullptr, [] { Table().CloseAll(); });
  }
  static DeferredCloses& Table() {
    static auto* table = new DeferredCloses;  // never destroyed: closes may still run at exit
    return *table;
  }
  // Closes what `slot` holds and frees it; whoever empties a slot closes.
  static void CloseSlot(std::atomic<int>& slot) {
    const int fd = slot.exchange(-1);
    if (fd >= 0) close(fd);
  }
  void CloseAll() {
    for (std::atomic<int>& slot : fds) CloseSlot(slot);
  }
};

void CloseInBackground(int fd) {
  for (std::atomic<int>& slot : DeferredCloses::Table().fds) {
    int empty = -1;
    if (!slot.compare_exchange_strong(empty, fd)) continue;
    if (!TaskPool::Shared().TrySchedule([&slot] { DeferredCloses::CloseSlot(slot); })) {
      DeferredCloses::CloseSlot(slot);  // no worker: nobody else will
    }
    return;
  }
  close(fd);
}

// Removes the name `path`; the file behind it, when this was its last name,
// is torn down in the background (CloseInBackground), through a descriptor
// that keeps the inode alive (OpenToHoldFile); a file it cannot hold is torn
// down by the unlink itself.
int UnlinkDeferringTeardown(const std::string& path) {
  const int fd = OpenToHoldFile(path.c_str());
  const int result = unlink(path.c_str());
  const int err = errno;
  if (fd >= 0) CloseInBackground(fd);
  errno = err;
  return result;
}

// Puts back what took `to`'s place (now under `from`'s name) when the
// exchange found it is not a regular file. Should the second exchange fail
// (the new file was removed from `to` in that instant), a rename still puts
// it back: left under `from`'s name, the caller would remove it as its temp
// file.
Status PutBack(const std::string& from, const std::string& to, mode_t mode) {
  Status refused = NotRegularFile(to, mode, "replace it");
  if (ExchangePaths(from.c_str(), to.c_str()) == 0 || rename(from.c_str(), to.c_str()) == 0) {
    return refused;
  }
  const int err = errno;
  return Status::IOError(std::string(refused.message()) + ", but putting it back failed (" +
                         std::generic_category().message(err) + ")");
}

// Replaces `to` by `from` with renameat2(RENAME_EXCHANGE) followed by an
// unlink of the old file under `from`'s name. `to` always names a complete
// file, as with rename(2), but:
// - ext4 does not start writeback of `from` (its auto_da_alloc heuristic
//   for files renamed over an existing one without an fsync: 0.06 s per
//   512 MiB on the caller's thread, for writes that chose not to sync);
// - the old file's teardown happens in the background.
// Returns nullopt, having changed nothing, when the exchange is not possible
// (nothing at `to`, a file system without RENAME_EXCHANGE, or a system
// without renameat2: kCanExchangePaths): the caller
// renames. A crash between exchange and unlink leaves the old bytes under
// the temp file's name, which the next write of `to` removes.
std::optional<Status> ReplaceByExchange(const std::string& from, const std::string& to) {
  if (ExchangePaths(from.c_str(), to.c_str()) != 0) return std::nullopt;
  struct stat old, now;
  if (lstat(from.c_str(), &old) != 0) return Status::OK();  // already gone: nothing to remove
  // Two names of one file (one path spelled twice, or two hard links): the
  // exchange changed nothing and, as with rename(2), nothing is removed.
  if (lstat(to.c_str(), &now) == 0 && now.st_dev == old.st_dev && now.st_ino == old.st_ino) return Status::OK();
  // Something other than a regular file took `to`'s place after the caller
  // checked it (ReplaceTarget): put it back rather than replace it.
  if (!S_ISREG(old.st_mode)) return PutBack(from, to, old.st_mode);
  // The new file is in place; an old file this fails to remove is a stale
  // temp file like any other.
  (void)UnlinkDeferringTeardown(from);
  return Status::OK();
}

class PosixEnv final : public Env {
 public:
  Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override {
    return OpenPosixReadable(path);
  }

  Result<std::shared_ptr<const ReadableFile>> ReadIntoMemory(const std::string& path) override {
    return ReadPosixIntoMemory(path);
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return NewPosixWritable(path);
  }

  Status AppendToFile(const std::string& path, std::span<const std::byte> data, bool sync) override {
    ScopedFd fd(RetryOnEintr(
        [&] { return open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW, 0644); }));
    if (fd.get() < 0) return PosixError("open", path, errno);
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return PosixError("stat", path, errno);
    if (!S_ISREG(st.st_mode)) return NotRegularFile(path, st.st_mode, "append to it");
    // One write call: a short write (a full disk) is an error, not retried,
    // since a retry could land after another process's append.
    const ssize_t n = RetryOnEintr([&] { return write(fd.get(), data.data(), data.size()); });
    if (n < 0) return PosixError("append to", path, errno);
    if (static_cast<size_t>(n) != data.size()) return Status::IOError("append to '" + path + "': short write");
    if (sync && SyncFileData(fd.get()) != 0) return PosixError(kSyncFileDataCall, path, errno);
    return Status::OK();
  }

  Result<std::string> ReplaceTarget(const std::string& path) override {
    struct stat st, link;
    if (stat(path.c_str(), &st) != 0) {
      const int err = errno;
      if (err != ENOENT) return PosixError("stat", path, err);
      if (lstat(path.c_str(), &link) != 0) return path;  // nothing there: created
      return Status::IOError(path + ": a symbolic link to a missing file; refusing to create a file through it");
    }
    const bool is_link = lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
    if (!S_ISREG(st.st_mode)) {
      return NotRegularFile(is_link ? path + " (a symbolic link)" : path, st.st_mode, "replace it");
    }
    if (!is_link) return path;
    // The link stays; the file it leads to is replaced, in its own directory.
    char* resolved = realpath(path.c_str(), nullptr);
    if (resolved == nullptr) return PosixError("resolve symbolic link", path, errno);
    std::string target(resolved);
    free(resolved);
    return target;
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (std::optional<Status> exchanged = ReplaceByExchange(from, to)) return *exchanged;
    // No exchange (no renameat2, or a file system without it): what is not
    // a regular file is refused before the rename rather than after.
    struct stat st;
    if (lstat(to.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return NotRegularFile(to, st.st_mode, "replace it");
    if (rename(from.c_str(), to.c_str()) != 0) {
      return PosixError("rename '" + from + "' to", to, errno);
    }
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    if (UnlinkDeferringTeardown(path) != 0) return PosixError("remove", path, errno);
    return Status::OK();
  }

  bool FileExists(const std::string& path) override { return access(path.c_str(), F_OK) == 0; }

  Result<uint64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return PosixError("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<FileStat> Stat(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return PosixError("stat", path, errno);
    FileStat out;
    out.size = static_cast<uint64_t>(st.st_size);
    out.mtime_ns = MtimeNs(st);
    out.is_directory = S_ISDIR(st.st_mode);
    out.is_regular = S_ISREG(st.st_mode);
    return out;
  }

  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    ScopedFd fd(
        RetryOnEintr([&] { return open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }));
    if (fd.get() < 0) return PosixError("list directory", dir, errno);
    DIR* d = fdopendir(fd.get());
    if (d == nullptr) return PosixError("list directory", dir, errno);
    fd.release();  // closedir closes it
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* entry = readdir(d)) {
      std::string_view name = entry->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    int err = errno;
    closedir(d);
    if (err != 0) return PosixError("list directory", dir, err);
    return names;
  }

  Status CreateDir(const std::string& dir) override {
    for (size_t pos = dir.find('/', 1); pos != std::string::npos; pos = dir.find('/', pos + 1)) {
      if (dir[pos - 1] == '/') continue;
      KV_RETURN_IF_ERROR(MakeDir(dir.substr(0, pos)));
    }
    return MakeDir(dir);
  }

  Status SyncDir(const std::string& dir) override { return SyncPath(dir); }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    ScopedFd fd(
        RetryOnEintr([&] { return open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644); }));
    if (fd.get() < 0) return PosixError("open lock file", path, errno);
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return PosixError("stat lock file", path, errno);
    LockTable::Key key{st.st_dev, st.st_ino};
    std::lock_guard<std::mutex> guard(Locks().mu());
    if (Locks().HeldHere(key)) {
      return Status::FailedPrecondition("lock '" + path + "': already held by this process");
    }
    if (RetryOnEintr([&] { return flock(fd.get(), LOCK_EX | LOCK_NB); }) != 0) {
      if (errno == EWOULDBLOCK) {
        return Status::FailedPrecondition("lock '" + path + "': held by another process");
      }
      return PosixError("lock", path, errno);
    }
    Locks().Add(key);
    return std::unique_ptr<FileLock>(std::make_unique<PosixFileLock>(fd.release(), key));
  }
};

}  // namespace

Env* Env::Default() {
  static Env* env = new PosixEnv;
  return env;
}

}  // namespace kvstore
