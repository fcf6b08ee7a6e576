#include <array>
#include <cassert>
#include <map>
#include <mutex>
#include <utility>

#include "kvstore/env.h"
#include "libkvstore/io/posix_file.h"

namespace kvstore {

namespace {

constexpr size_t kNumOps = 6;

size_t OpIndex(FaultInjectionEnv::Op op) { return static_cast<size_t>(op); }

std::string_view OpName(FaultInjectionEnv::Op op) {
  switch (op) {
    case FaultInjectionEnv::Op::kAppend:
      return "Append";
    case FaultInjectionEnv::Op::kSync:
      return "Sync";
    case FaultInjectionEnv::Op::kRename:
      return "RenameFile";
    case FaultInjectionEnv::Op::kSyncDir:
      return "SyncDir";
    case FaultInjectionEnv::Op::kNewWritable:
      return "NewWritableFile";
    case FaultInjectionEnv::Op::kWriteAt:
      return "WriteAt";
  }
  return "?";
}

// The operation as the POSIX Env names it in its messages.
std::string_view PosixVerb(FaultInjectionEnv::Op op) {
  switch (op) {
    case FaultInjectionEnv::Op::kAppend:
    case FaultInjectionEnv::Op::kWriteAt:
      return "write";
    case FaultInjectionEnv::Op::kSync:
      return "fdatasync";
    case FaultInjectionEnv::Op::kRename:
      return "rename";
    case FaultInjectionEnv::Op::kSyncDir:
      return "fsync directory";
    case FaultInjectionEnv::Op::kNewWritable:
      return "open";
  }
  return "?";
}

}  // namespace

// An injected failure: `error` as given, or (err != 0) the POSIX Env's
// error for errno `err` on the call's path.
struct FaultInjectionEnv::Fault {
  Status error;
  int err = 0;
};

class FaultInjectionEnv::WrappedFile final : public WritableFile {
 public:
  WrappedFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  Status Append(std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(env_->MaybeFail(Op::kAppend, path_));
    return base_->Append(data);
  }
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(env_->MaybeFail(Op::kWriteAt, path_));
    return base_->WriteAt(offset, data);
  }
  Status Sync() override {
    KV_RETURN_IF_ERROR(env_->MaybeFail(Op::kSync, path_));
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }
  uint64_t size() const override { return base_->size(); }
  void WillNotSync() override { base_->WillNotSync(); }
  void WillReplace(const std::string& path) override { base_->WillReplace(path); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

struct FaultInjectionEnv::State {
  std::mutex mu;
  std::array<int, kNumOps> counts{};
  // Keyed by the 1-based call index, counted since the last Reset().
  std::array<std::map<int, Fault>, kNumOps> nth;
  std::array<bool, kNumOps> always{};
  std::array<Fault, kNumOps> always_error;
};

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base), state_(std::make_unique<State>()) {}

FaultInjectionEnv::~FaultInjectionEnv() = default;

void FaultInjectionEnv::FailNth(Op op, int n, Status error) {
  assert(n >= 1);
  std::lock_guard<std::mutex> guard(state_->mu);
  size_t i = OpIndex(op);
  state_->nth[i][state_->counts[i] + n] = Fault{std::move(error)};
}

void FaultInjectionEnv::FailNthWithErrno(Op op, int n, int err) {
  assert(n >= 1 && err != 0);
  std::lock_guard<std::mutex> guard(state_->mu);
  size_t i = OpIndex(op);
  state_->nth[i][state_->counts[i] + n] = Fault{Status(), err};
}

void FaultInjectionEnv::FailAlways(Op op, Status error) {
  std::lock_guard<std::mutex> guard(state_->mu);
  state_->always[OpIndex(op)] = true;
  state_->always_error[OpIndex(op)] = Fault{std::move(error)};
}

void FaultInjectionEnv::Reset() {
  std::lock_guard<std::mutex> guard(state_->mu);
  state_->counts = {};
  state_->nth = {};
  state_->always = {};
  state_->always_error = {};
}

int FaultInjectionEnv::Count(Op op) const {
  std::lock_guard<std::mutex> guard(state_->mu);
  return state_->counts[OpIndex(op)];
}

Status FaultInjectionEnv::MaybeFail(Op op, const std::string& path, std::string_view verb) {
  std::lock_guard<std::mutex> guard(state_->mu);
  size_t i = OpIndex(op);
  int call = ++state_->counts[i];
  bool fail = state_->always[i];
  Fault fault = state_->always_error[i];
  if (auto it = state_->nth[i].find(call); it != state_->nth[i].end()) {
    fail = true;
    fault = std::move(it->second);
    state_->nth[i].erase(it);
  }
  if (!fail) return Status::OK();
  if (fault.err != 0) return PosixError(verb.empty() ? PosixVerb(op) : verb, path, fault.err);
  if (!fault.error.ok()) return fault.error;
  return Status::IOError("injected fault: " + std::string(OpName(op)) + " call " +
                         std::to_string(call));
}

Result<std::shared_ptr<const ReadableFile>> FaultInjectionEnv::OpenReadable(
    const std::string& path) {
  return base_->OpenReadable(path);
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(const std::string& path) {
  KV_RETURN_IF_ERROR(MaybeFail(Op::kNewWritable, path));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(std::make_unique<WrappedFile>(this, path, std::move(file)));
}

Status FaultInjectionEnv::AppendToFile(const std::string& path, std::span<const std::byte> data, bool sync) {
  KV_RETURN_IF_ERROR(MaybeFail(Op::kAppend, path));
  if (sync) KV_RETURN_IF_ERROR(MaybeFail(Op::kSync, path));
  return base_->AppendToFile(path, data, sync);
}

Result<std::string> FaultInjectionEnv::ReplaceTarget(const std::string& path) {
  return base_->ReplaceTarget(path);
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  KV_RETURN_IF_ERROR(MaybeFail(Op::kRename, to, "rename '" + from + "' to"));
  return base_->RenameFile(from, to);
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) { return base_->RemoveFile(path); }

bool FaultInjectionEnv::FileExists(const std::string& path) { return base_->FileExists(path); }

Result<uint64_t> FaultInjectionEnv::GetFileSize(const std::string& path) {
  return base_->GetFileSize(path);
}

Result<Env::FileStat> FaultInjectionEnv::Stat(const std::string& path) { return base_->Stat(path); }

Result<std::vector<std::string>> FaultInjectionEnv::GetChildren(const std::string& dir) {
  return base_->GetChildren(dir);
}

Status FaultInjectionEnv::CreateDir(const std::string& dir) { return base_->CreateDir(dir); }

Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  KV_RETURN_IF_ERROR(MaybeFail(Op::kSyncDir, dir));
  return base_->SyncDir(dir);
}

Result<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(const std::string& path) {
  return base_->LockFile(path);
}

bool FaultInjectionEnv::ProcessAlive(int64_t pid) { return base_->ProcessAlive(pid); }

int64_t FaultInjectionEnv::ProcessId() { return base_->ProcessId(); }

}  // namespace kvstore
