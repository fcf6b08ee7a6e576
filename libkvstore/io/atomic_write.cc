#include <atomic>
#include <charconv>
#include <string_view>
#include <utility>

#include "kvstore/env.h"

namespace kvstore {
namespace {

constexpr std::string_view kTempMarker = ".kvtmp-";

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The pid in "<base>.kvtmp-<pid>-<n>", or -1 when `name` is not a temp file
// of `base`.
int64_t TempFilePid(std::string_view name, std::string_view base) {
  if (name.size() <= base.size() + kTempMarker.size() || !name.starts_with(base)) return -1;
  name.remove_prefix(base.size());
  if (!name.starts_with(kTempMarker)) return -1;
  name.remove_prefix(kTempMarker.size());
  int64_t pid = -1;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc() || end == name.data() || end == name.data() + name.size() || *end != '-') {
    return -1;
  }
  std::string_view counter(end + 1, name.data() + name.size() - (end + 1));
  if (counter.empty() || counter.find_first_not_of("0123456789") != std::string_view::npos) {
    return -1;
  }
  return pid;
}

// Best effort: a temp file that cannot be removed now is retried by the next
// write, and must not fail this one.
void RemoveStaleTempFiles(Env* env, const std::string& path) {
  std::string base = BaseName(path);
  // `path` up to its base name, so that a temp file is named exactly as it
  // was created ("a.kvtmp-..." stays relative, never "./a.kvtmp-...").
  std::string dir_prefix = path.substr(0, path.size() - base.size());
  Result<std::vector<std::string>> children = env->GetChildren(DirName(path));
  if (!children.ok()) return;
  int64_t self = env->ProcessId();
  for (const std::string& name : *children) {
    int64_t pid = TempFilePid(name, base);
    // Our own pid: possibly another thread's write in progress.
    if (pid <= 0 || pid == self || env->ProcessAlive(pid)) continue;
    (void)env->RemoveFile(dir_prefix + name);
  }
}

// Removes the temp file on every failure path, including an exception
// thrown by the caller's fill function.
class TempFileGuard {
 public:
  TempFileGuard(Env* env, std::string path) : env_(env), path_(std::move(path)) {}
  ~TempFileGuard() {
    if (file_ != nullptr) (void)file_->Close();
    if (armed_) (void)env_->RemoveFile(path_);
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;

  const std::string& path() const { return path_; }
  void Adopt(std::unique_ptr<WritableFile> file) { file_ = std::move(file); }
  WritableFile& file() { return *file_; }
  Status SyncAndClose() {
    KV_RETURN_IF_ERROR(file_->Sync());
    Status s = file_->Close();
    file_.reset();
    return s;
  }
  void Disarm() { armed_ = false; }

 private:
  Env* env_;
  std::string path_;
  std::unique_ptr<WritableFile> file_;
  // Also armed before the file exists: a failed create may still leave one.
  bool armed_ = true;
};

std::atomic<uint64_t> temp_counter{0};

}  // namespace

Status WriteFileAtomic(Env* env, const std::string& path,
                       const std::function<Status(WritableFile&)>& fill) {
  RemoveStaleTempFiles(env, path);

  TempFileGuard temp(env, path + std::string(kTempMarker) + std::to_string(env->ProcessId()) + "-" +
                              std::to_string(temp_counter.fetch_add(1)));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(temp.path()));
  temp.Adopt(std::move(file));
  KV_RETURN_IF_ERROR(fill(temp.file()));
  KV_RETURN_IF_ERROR(temp.SyncAndClose());
  KV_RETURN_IF_ERROR(env->RenameFile(temp.path(), path));
  temp.Disarm();
  return env->SyncDir(DirName(path));
}

Status WriteStringAtomic(Env* env, const std::string& path, std::span<const std::byte> content) {
  return WriteFileAtomic(env, path, [&](WritableFile& file) { return file.Append(content); });
}

}  // namespace kvstore
