#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "kvstore/env.h"

namespace kvstore {
namespace {

using Bytes = std::vector<std::byte>;

// Everything a MemEnv holds, behind one mutex. Files and locks keep it alive
// through a shared_ptr, so they may outlive the Env.
struct MemState {
  std::mutex mu;
  // A file's bytes are shared with the writers open on it, so a rename or
  // removal does not detach a writer (as with a POSIX descriptor).
  std::map<std::string, std::shared_ptr<Bytes>> files;
  std::set<std::string> dirs;
  std::set<std::string> locked;
};

// `dir` without trailing slashes ("/" stays).
std::string TrimDir(const std::string& dir) {
  size_t end = dir.find_last_not_of('/');
  if (end == std::string::npos) return dir.empty() ? dir : "/";
  return dir.substr(0, end + 1);
}

// "" for ".", else `dir` with exactly one trailing '/'.
std::string ChildPrefix(const std::string& dir) {
  std::string trimmed = TrimDir(dir);
  if (trimmed == ".") return "";
  if (trimmed == "/") return trimmed;
  return trimmed + "/";
}

// The first path component of `path` below `prefix`, or "" when `path` is
// not below it.
std::string ChildOf(const std::string& prefix, const std::string& path) {
  if (path.size() <= prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return "";
  if (prefix.empty() && path.front() == '/') return "";
  size_t end = path.find('/', prefix.size());
  return path.substr(prefix.size(), end == std::string::npos ? end : end - prefix.size());
}

class MemReadableFile final : public ReadableFile {
 public:
  MemReadableFile(std::string path, Bytes bytes)
      : ReadableFile(std::move(path)), bytes_(std::move(bytes)) {}
  std::span<const std::byte> data() const override { return bytes_; }

 private:
  const Bytes bytes_;
};

class MemWritableFile final : public WritableFile {
 public:
  MemWritableFile(std::shared_ptr<MemState> state, std::string path, std::shared_ptr<Bytes> bytes)
      : state_(std::move(state)), path_(std::move(path)), bytes_(std::move(bytes)) {}

  Status Append(std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(CheckOpen("append"));
    std::lock_guard<std::mutex> guard(state_->mu);
    bytes_->insert(bytes_->end(), data.begin(), data.end());
    size_ += data.size();
    return Status::OK();
  }
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(CheckOpen("write"));
    if (offset > size_ || data.size() > size_ - offset) {
      return Status::InvalidArgument("write '" + path_ + "': range beyond the appended bytes");
    }
    std::lock_guard<std::mutex> guard(state_->mu);
    std::copy(data.begin(), data.end(), bytes_->begin() + static_cast<ptrdiff_t>(offset));
    return Status::OK();
  }
  Status Sync() override { return CheckOpen("sync"); }
  Status Close() override {
    closed_ = true;
    return Status::OK();
  }
  uint64_t size() const override { return size_; }

 private:
  Status CheckOpen(std::string_view op) const {
    if (!closed_) return Status::OK();
    return Status::FailedPrecondition(std::string(op) + " '" + path_ + "': file is closed");
  }

  std::shared_ptr<MemState> state_;
  std::string path_;
  std::shared_ptr<Bytes> bytes_;
  uint64_t size_ = 0;
  bool closed_ = false;
};

class MemFileLock final : public FileLock {
 public:
  MemFileLock(std::shared_ptr<MemState> state, std::string path)
      : state_(std::move(state)), path_(std::move(path)) {}
  ~MemFileLock() override {
    std::lock_guard<std::mutex> guard(state_->mu);
    state_->locked.erase(path_);
  }

 private:
  std::shared_ptr<MemState> state_;
  std::string path_;
};

class MemEnv final : public Env {
 public:
  Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    auto it = state_->files.find(path);
    if (it == state_->files.end()) return NotFound("open", path);
    // A copy: later writes to the file must not change what a reader holds.
    return std::shared_ptr<const ReadableFile>(
        std::make_shared<MemReadableFile>(path, *it->second));
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    if (IsDirLocked(path)) return Status::IOError("open '" + path + "': is a directory");
    std::shared_ptr<Bytes>& bytes = state_->files[path];
    if (bytes == nullptr) {
      bytes = std::make_shared<Bytes>();
    } else {
      bytes->clear();
    }
    return std::unique_ptr<WritableFile>(std::make_unique<MemWritableFile>(state_, path, bytes));
  }

  Result<std::string> ReplaceTarget(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    if (state_->files.count(path) == 0 && IsDirLocked(path)) {
      return Status::IOError(path + ": not a regular file (directory); refusing to replace it");
    }
    return path;
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    auto it = state_->files.find(from);
    if (it == state_->files.end()) return NotFound("rename '" + from + "' to", to);
    std::shared_ptr<Bytes> bytes = it->second;
    state_->files.erase(it);
    state_->files[to] = std::move(bytes);
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    if (state_->files.erase(path) == 0) return NotFound("remove", path);
    return Status::OK();
  }

  bool FileExists(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    return state_->files.count(path) > 0 || IsDirLocked(path);
  }

  Result<uint64_t> GetFileSize(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    auto it = state_->files.find(path);
    if (it == state_->files.end()) return NotFound("stat", path);
    return static_cast<uint64_t>(it->second->size());
  }

  Result<FileStat> Stat(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    FileStat st;
    if (auto it = state_->files.find(path); it != state_->files.end()) {
      st.size = it->second->size();
      st.is_regular = true;
      return st;
    }
    if (!IsDirLocked(path)) return NotFound("stat", path);
    st.is_directory = true;
    return st;
  }

  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    if (!IsDirLocked(dir)) return NotFound("list directory", dir);
    std::string prefix = ChildPrefix(dir);
    std::set<std::string> names;
    for (const auto& [path, bytes] : state_->files) names.insert(ChildOf(prefix, path));
    for (const std::string& d : state_->dirs) names.insert(ChildOf(prefix, d));
    names.erase("");
    return std::vector<std::string>(names.begin(), names.end());
  }

  Status CreateDir(const std::string& path) override {
    std::string dir = TrimDir(path);
    std::lock_guard<std::mutex> guard(state_->mu);
    for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
      std::string part = dir.substr(0, pos);
      if (state_->files.count(part) > 0) {
        return Status::IOError("create directory '" + part + "': exists and is not a directory");
      }
      if (!part.empty() && part.back() != '/') state_->dirs.insert(part);
      if (pos == std::string::npos) return Status::OK();
    }
  }

  Status SyncDir(const std::string& dir) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    if (!IsDirLocked(dir)) return NotFound("open directory", dir);
    return Status::OK();
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    std::lock_guard<std::mutex> guard(state_->mu);
    if (!state_->locked.insert(path).second) {
      return Status::FailedPrecondition("lock '" + path + "': already held by this process");
    }
    std::shared_ptr<Bytes>& bytes = state_->files[path];
    if (bytes == nullptr) bytes = std::make_shared<Bytes>();
    return std::unique_ptr<FileLock>(std::make_unique<MemFileLock>(state_, path));
  }

 private:
  static Status NotFound(std::string_view op, const std::string& path) {
    return Status::NotFound(std::string(op) + " '" + path + "': No such file or directory");
  }

  // Directories are implicit: "." and "/", every created directory, and
  // every directory that contains a file. REQUIRES: state_->mu held.
  bool IsDirLocked(const std::string& path) const {
    std::string dir = TrimDir(path);
    if (dir == "." || dir == "/" || state_->dirs.count(dir) > 0) return true;
    std::string prefix = ChildPrefix(dir);
    auto it = state_->files.lower_bound(prefix);
    return it != state_->files.end() && !ChildOf(prefix, it->first).empty();
  }

  std::shared_ptr<MemState> state_ = std::make_shared<MemState>();
};

}  // namespace

std::unique_ptr<Env> NewMemEnv() { return std::make_unique<MemEnv>(); }

}  // namespace kvstore
