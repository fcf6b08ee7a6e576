// Env: every file-system access of libkvstore goes through an Env.
//
// Env::Default() is the POSIX implementation: reads map files read-only
// (mmap), writes go through buffered appendable files with Sync (fdatasync),
// and WriteFileAtomic replaces a file by temp file + fsync + rename +
// directory fsync. NewMemEnv() keeps files in memory (tests, fuzzing);
// FaultInjectionEnv wraps another Env and fails the Nth write, sync or
// rename (tests of crash safety).
//
// Errors: NotFound when a named file or directory does not exist, IOError for
// every other refusal of the operating system (ENOSPC, EIO, EACCES, ...).
// Messages name the operation and the path and end with the system's reason,
// e.g. "write '/data/c.safetensors': No space left on device".
//
// Thread safety: every Env in this header may be used from many threads at
// once. A WritableFile is used by one thread at a time. A ReadableFile is
// immutable and may be shared freely. Files and locks returned by an Env
// must not outlive it (Env::Default() is never destroyed).
#ifndef KVSTORE_ENV_H_
#define KVSTORE_ENV_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/status.h"

namespace kvstore {

// The whole content of a file, usually a read-only mapping. The bytes stay
// valid and unchanged while any shared_ptr to this object (or a Storage made
// by AsStorage) is alive, even if the file is replaced or deleted meanwhile:
// libkvstore never writes into an existing file, it replaces it by rename.
class ReadableFile : public std::enable_shared_from_this<ReadableFile> {
 public:
  virtual ~ReadableFile() = default;
  virtual std::span<const std::byte> data() const = 0;
  uint64_t size() const { return data().size(); }
  const std::string& path() const { return path_; }
  // Hint that bytes [offset, offset + length) will all be read soon. A
  // mapped file populates its page tables for them in one system call
  // instead of taking a fault per page. No effect on the content.
  virtual void WillRead(uint64_t offset, uint64_t length) const {
    (void)offset;
    (void)length;
  }
  // Copies bytes [offset, offset + out.size()) into `out`: InvalidArgument
  // past the end. A mapped file reads them from the file with pread when it
  // is still the file it maps (on a VM, a read of bytes used once costs less
  // than first touching their mapped pages: docs/performance.md), else from
  // the mapping; IOError when the file
  // shrank. For one pass over bytes, e.g. compressed frames.
  virtual Status ReadAt(uint64_t offset, std::span<std::byte> out) const;
  // Read-only Storage over the same bytes that keeps this file alive, so
  // Arrays can view tensors in place. REQUIRES: *this is owned by a
  // shared_ptr (always true for files returned by an Env).
  std::shared_ptr<Storage> AsStorage() const;

 protected:
  explicit ReadableFile(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

// An appendable file. Appends may be buffered in user space: the bytes reach
// the OS at the latest at Sync() or Close(). Close() or destruction does not
// imply Sync(); destruction closes (and flushes) a file not yet closed,
// dropping any error, so callers that care call Close().
//
// After a failed Append, Sync or Close the file's content is unknown: every
// later call returns that first error. Append or Sync after Close is
// FailedPrecondition; Close after Close returns the status of the first.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::span<const std::byte> data) = 0;
  // Overwrites bytes already appended: [offset, offset + data.size()) must
  // lie within size(). Used to fill in a header whose length was reserved
  // before the data behind it was written. Fails like Append.
  virtual Status WriteAt(uint64_t offset, std::span<const std::byte> data) = 0;
  // Flushes buffers to the OS and the OS to the device (fdatasync; F_FULLFSYNC on macOS).
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  // Bytes appended so far.
  virtual uint64_t size() const = 0;
  // Appends bytes [offset, offset + length) of `source`, as
  // Append(source.data().subspan(offset, length)) does. The POSIX file
  // copies them inside the kernel (copy_file_range, where the system has
  // it) when `source` is a POSIX mapping of a file that is still the one
  // mapped, without touching the mapping. REQUIRES: the range lies in source.
  virtual Status AppendCopyOf(const ReadableFile& source, uint64_t offset, uint64_t length) {
    source.WillRead(offset, length);
    return Append(source.data().subspan(offset, length));
  }
  // Hint that Sync() will not be called (a cache written without fsync): a
  // file that hands written ranges to the device early, so that a final
  // Sync has little left to do, stops doing so. No effect on the content.
  virtual void WillNotSync() {}
  // Hint that this file will replace the regular file at `path`
  // (WriteFileAtomic's target). A file that is synced may give up the old
  // file's cached pages behind its own writes, range for range, so that the
  // two hold about one file's worth of page cache, as a rewrite in place
  // would; the old file stays complete until it is replaced. No effect on
  // either file's content; nothing happens when `path` is missing or is not
  // a regular file.
  virtual void WillReplace(const std::string& path) { (void)path; }
};

// An advisory, exclusive, process-level lock on a file (see Env::LockFile).
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never destroyed.
  static Env* Default();

  // Maps the whole file read-only. NotFound when it does not exist, IOError
  // for other failures (including a directory). An empty file gives an
  // empty span.
  virtual Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) = 0;
  // Reads the whole file into private memory instead of mapping it: for files
  // that another program rewrites in place (llama-server truncates and
  // rewrites its slot files), where a mapping could see a mix of old and new
  // bytes, or fault (SIGBUS) when the file shrinks. IOError when the file
  // keeps changing while it is read, ResourceExhausted when it does not fit
  // in memory. The default copies OpenReadable's bytes.
  virtual Result<std::shared_ptr<const ReadableFile>> ReadIntoMemory(const std::string& path);
  // Creates or truncates `path` for writing; NotFound when its directory
  // does not exist (the in-memory Env creates directories implicitly);
  // IOError, with nothing opened or written, when `path` exists and is not a
  // regular file (a device, a FIFO, a socket, a directory).
  // Truncating a file that someone has mapped breaks their mapping: replace
  // existing files with WriteFileAtomic instead.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // Appends `data` at the end of `path` (created if missing), then syncs it
  // when `sync`. The POSIX Env writes it with one O_APPEND write, so that
  // appends of several processes to one file never overwrite or (up to the
  // file system's atomic write size, in practice a page or more on local
  // file systems) interleave each other's; IOError, with nothing written,
  // when `path` is a symbolic link or not a regular file. The default
  // re-writes the file with WriteFileAtomic: atomic, but not for
  // concurrent appenders.
  virtual Status AppendToFile(const std::string& path, std::span<const std::byte> data, bool sync);
  // Atomically replaces `to` by `from` (POSIX rename). NotFound when `from`
  // does not exist; OK, changing nothing, when both name one file. The
  // POSIX Env refuses (IOError, both left as they were) to replace anything
  // at `to` but a regular file, and frees the replaced file's pages and
  // blocks in the background (RENAME_EXCHANGE, then unlink, where renameat2 exists; a few dozen
  // such frees wait for busy pool workers at most, beyond that the caller
  // does them; a child of fork() does those it inherits at once).
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // NotFound when `path` does not exist. The POSIX Env frees a removed
  // file's pages and blocks in the background.
  virtual Status RemoveFile(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual Result<uint64_t> GetFileSize(const std::string& path) = 0;
  // What stat(2) says of `path`, links followed: NotFound when nothing is
  // there. The in-memory Env has no clock (mtime_ns 0).
  struct FileStat {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool is_directory = false;
    bool is_regular = false;
  };
  virtual Result<FileStat> Stat(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, excluding "." and "..".
  virtual Result<std::vector<std::string>> GetChildren(const std::string& dir) = 0;
  // Creates `dir` (and missing parents). OK if it exists.
  virtual Status CreateDir(const std::string& dir) = 0;
  // Makes a rename or file creation inside `dir` durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // Takes an exclusive advisory lock on `path` (created if missing, never
  // removed), held until the returned object is destroyed. Does not wait:
  // FailedPrecondition when another process ("held by another process") or
  // another lock object in this process ("already held by this process")
  // holds it. The POSIX lock is flock(2) on a close-on-exec descriptor, so it
  // is released when the process dies, SIGKILL included.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
  // True when a process with this id exists (temp-file cleanup uses it);
  // false for ids <= 0. The defaults ask the operating system (kill(pid, 0),
  // getpid()); tests override them to fake other processes.
  virtual bool ProcessAlive(int64_t pid);
  virtual int64_t ProcessId();
  // The file that replacing `path` (WriteFileAtomic) writes: `path` itself
  // when nothing or a regular file is there; for a symbolic link to a
  // regular file, that file (its path with every link resolved), so the link
  // stays and the file it names is replaced in its own directory. IOError
  // naming `path` for anything else: a directory, a device, a FIFO or a
  // socket, a link to one, or a link to nothing ("/dev/null: not a regular
  // file (character device); refusing to replace it"). The default (an Env
  // without such files) returns `path`.
  virtual Result<std::string> ReplaceTarget(const std::string& path);
};

// Writes `path` atomically: `fill` appends the content to a temporary file in
// the same directory (named "<path>.kvtmp-<pid>-<n>", pid = env->ProcessId());
// the temp file is then synced, closed, renamed over `path`, and the
// directory synced. Readers that mapped the old `path` keep seeing the old
// bytes. Concurrent calls for the same path are safe: the last rename wins.
//
// Only a regular file is replaced (env->ReplaceTarget): when `path` is a
// symbolic link to one, the file it names is replaced (the temp file is
// created next to it) and the link stays. A `path` that is a directory, a
// device, a FIFO, a socket, a link to one of those or a dangling link is
// refused with IOError before any temp file exists, and left untouched.
//
// On a failure up to and including the rename (a failing `fill` too) the
// error is returned, the temp file is removed and `path` is left exactly as
// it was. Errors of the temp file name `path` ("write 'out': No space left on
// device"), since the temp file is gone when the caller sees them. When
// only the final directory sync fails, the error is returned
// but `path` already holds the new content (the rename happened; its
// durability across a power loss is what is in doubt). A process killed at
// any moment leaves `path` complete, old or new, plus at most a temp file;
// one ended by a signal whose handler calls RemoveTempFilesInProgress leaves
// no temp file.
//
// Before writing, temp files of `path` ("<basename>.kvtmp-<pid>-<n>") whose
// pid is not env->ProcessId() and not alive are removed; those of live
// processes are never touched.
//
// How far a write survives a power loss (a crash of the process never
// leaves less than the above, whatever is chosen):
enum class Durability {
  // Temp file + rename, no sync: for caches that verify what they read (a
  // power loss may leave `path` old, new, empty or torn, never a mix the
  // digests accept).
  kNone,
  // Synced only when `path` names an existing file, whose content a power
  // loss right after the rename could otherwise take with it. A new file is
  // written as cp writes one: a power loss may leave it missing, empty or
  // short (readers refuse those), and nothing that existed is lost.
  kWhenReplacing,
  // Temp file, file sync, rename, directory sync, always.
  kAlways,
};
struct AtomicWriteOptions {
  Durability durability = Durability::kAlways;
};
Status WriteFileAtomic(Env* env, const std::string& path,
                       const std::function<Status(WritableFile&)>& fill, const AtomicWriteOptions& options = {});

// For a signal handler on the way to ending the process (SIGINT, SIGTERM):
// removes the temp files of this process's WriteFileAtomic calls in
// progress on Env::Default(), so an interrupted write leaves nothing but
// the old `path`. Async-signal-safe (lock-free atomics and unlink(2) only;
// errno is preserved). Returns how many files it removed. A write it
// interrupted fails if it goes on (its rename finds no file), so call it
// only when the process is about to end.
int RemoveTempFilesInProgress();

// Convenience for small files: the whole content at once, atomically.
Status WriteStringAtomic(Env* env, const std::string& path, std::span<const std::byte> content);

// The directory part of a path ("." for a bare file name).
std::string DirName(const std::string& path);

// An Env that keeps files in memory. Thread-safe. Directories are implicit
// ("." and "/" always exist; a directory exists once created or once a file
// lies under it). OpenReadable returns a copy, so later writes to the file
// never change bytes a reader holds. LockFile excludes other lock objects of
// the same MemEnv; ProcessAlive/ProcessId are the operating system's.
std::unique_ptr<Env> NewMemEnv();

// Wraps `base` (not owned, must outlive it) and injects failures. Counters
// count calls made through this Env (and the writable files it returned)
// since construction or the last Reset(), failed calls included. A failed
// call does nothing: it does not reach `base`. Calls not listed in Op always
// pass through.
class FaultInjectionEnv : public Env {
 public:
  enum class Op { kAppend, kSync, kRename, kSyncDir, kNewWritable, kWriteAt };

  explicit FaultInjectionEnv(Env* base);
  ~FaultInjectionEnv() override;

  // The `n`-th call (1-based) of `op` from now on fails with `error`, or,
  // when `error` is ok (the default), with IOError "injected fault: <Op>
  // call <index>". Later calls succeed again. REQUIRES: n >= 1.
  void FailNth(Op op, int n, Status error = Status());
  // The `n`-th call of `op` fails as the POSIX Env fails for errno `err`:
  // its message names the call's file ("write '<path>': No space left on
  // device" for ENOSPC on an Append). REQUIRES: n >= 1, err != 0.
  void FailNthWithErrno(Op op, int n, int err);
  // Every call of `op` fails from now on (`error` as for FailNth).
  void FailAlways(Op op, Status error = Status());
  // Clears all pending faults and counters.
  void Reset();
  // How many calls of `op` were made.
  int Count(Op op) const;

  Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  // Counted and failed as an Append (then as a Sync, when `sync`).
  Status AppendToFile(const std::string& path, std::span<const std::byte> data, bool sync) override;
  Result<std::string> ReplaceTarget(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  Result<uint64_t> GetFileSize(const std::string& path) override;
  Result<FileStat> Stat(const std::string& path) override;
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override;
  Status CreateDir(const std::string& dir) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;
  bool ProcessAlive(int64_t pid) override;
  int64_t ProcessId() override;

 private:
  class WrappedFile;  // the writable files it returns, which consult MaybeFail
  struct Fault;
  struct State;

  // Counts this call of `op` on `path`; returns the injected error for it,
  // or OK. `verb` names the operation in an errno fault's message (default:
  // the POSIX Env's word for `op`).
  Status MaybeFail(Op op, const std::string& path, std::string_view verb = {});

  Env* base_;
  std::unique_ptr<State> state_;
};

}  // namespace kvstore

#endif  // KVSTORE_ENV_H_
