#include <atomic>
#include <optional>
#include <string_view>
#include <utility>

#include "kvstore/env.h"
#include "libkvstore/io/temp_file_name.h"
#include "libkvstore/io/temp_file_registry.h"

namespace kvstore {
namespace {

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The pid in "<base>.kvtmp-<pid>-<n>", or -1 when `name` is not a temp file
// of `base`.
int64_t TempFilePid(std::string_view name, std::string_view base) {
  if (!name.starts_with(base) || !name.substr(base.size()).starts_with(kTempMarker)) return -1;
  std::string_view counter;
  const int64_t pid = TempFileWriterPid(name.substr(base.size()), &counter);
  if (pid < 0 || counter.find_first_not_of("0123456789") != std::string_view::npos) return -1;
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
  Status SyncAndClose(bool sync) {
    if (sync) KV_RETURN_IF_ERROR(file_->Sync());
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

// Replaces every occurrence of `from` in `text` by `to`.
std::string ReplaceAll(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// An error of the temp file as the caller sees it: about `path`, the file
// they asked for (the temp file is gone by the time it is returned), e.g.
// "write 'out.safetensors': No space left on device".
Status AboutOutput(const Status& s, const std::string& temp, const std::string& target,
                   const std::string& path) {
  if (s.ok()) return s;
  std::string message(s.message());
  message = ReplaceAll(std::move(message), "rename '" + temp + "' to '" + target + "'", "replace '" + path + "'");
  return Status(s.code(), ReplaceAll(std::move(message), temp, path));
}

}  // namespace

Status WriteFileAtomic(Env* env, const std::string& path, const std::function<Status(WritableFile&)>& fill,
                       const AtomicWriteOptions& options) {
  // What is replaced: `path`, or the regular file a symbolic link there
  // leads to. Anything else (a device, a FIFO, a directory) is refused
  // before a temp file exists.
  KV_ASSIGN_OR_RETURN(const std::string target, env->ReplaceTarget(path));
  // Listing the directory costs O(files in it): a target that is itself a
  // temp file (a PromptCacheStore entry being staged) skips it, so filling
  // a store is not quadratic; the store removes its own leftovers at Open.
  if (BaseName(target).find(kTempMarker) == std::string::npos) RemoveStaleTempFiles(env, target);

  const std::string temp_path = target + std::string(kTempMarker) + std::to_string(env->ProcessId()) + "-" +
                                std::to_string(temp_counter.fetch_add(1));
  // Registered before it exists and released after it is gone or renamed,
  // so a signal handler can remove it at any moment in between.
  std::optional<TempFileRegistration> registration;
  if (env == Env::Default()) registration.emplace(temp_path);
  const bool sync = options.durability == Durability::kAlways ||
                    (options.durability == Durability::kWhenReplacing && env->FileExists(target));
  TempFileGuard temp(env, temp_path);
  auto about_output = [&](const Status& s) { return AboutOutput(s, temp_path, target, path); };
  Result<std::unique_ptr<WritableFile>> file = env->NewWritableFile(temp.path());
  if (!file.ok()) return about_output(file.status());
  temp.Adopt(std::move(file).value());
  if (!sync) temp.file().WillNotSync();
  temp.file().WillReplace(target);
  if (Status s = fill(temp.file()); !s.ok()) return about_output(s);
  if (Status s = temp.SyncAndClose(sync); !s.ok()) return about_output(s);
  if (Status s = env->RenameFile(temp.path(), target); !s.ok()) return about_output(s);
  temp.Disarm();
  return sync ? env->SyncDir(DirName(target)) : Status::OK();
}

Status WriteStringAtomic(Env* env, const std::string& path, std::span<const std::byte> content) {
  return WriteFileAtomic(env, path, [&](WritableFile& file) { return file.Append(content); });
}

}  // namespace kvstore
