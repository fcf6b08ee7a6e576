#include <array>
#include <cassert>
#include <map>
#include <mutex>
#include <utility>

#include "kvstore/env.h"

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

}  // namespace

class FaultInjectionEnv::WrappedFile final : public WritableFile {
 public:
  WrappedFile(FaultInjectionEnv* env, std::unique_ptr<WritableFile> base)
      : env_(env), base_(std::move(base)) {}

  Status Append(std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(env_->MaybeFail(Op::kAppend));
    return base_->Append(data);
  }
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    KV_RETURN_IF_ERROR(env_->MaybeFail(Op::kWriteAt));
    return base_->WriteAt(offset, data);
  }
  Status Sync() override {
    KV_RETURN_IF_ERROR(env_->MaybeFail(Op::kSync));
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }
  uint64_t size() const override { return base_->size(); }

 private:
  FaultInjectionEnv* env_;
  std::unique_ptr<WritableFile> base_;
};

struct FaultInjectionEnv::State {
  std::mutex mu;
  std::array<int, kNumOps> counts{};
  // Keyed by the 1-based call index, counted since the last Reset().
  std::array<std::map<int, Status>, kNumOps> nth;
  std::array<bool, kNumOps> always{};
  std::array<Status, kNumOps> always_error;
};

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base), state_(std::make_unique<State>()) {}

FaultInjectionEnv::~FaultInjectionEnv() = default;

void FaultInjectionEnv::FailNth(Op op, int n, Status error) {
  assert(n >= 1);
  std::lock_guard<std::mutex> guard(state_->mu);
  size_t i = OpIndex(op);
  state_->nth[i][state_->counts[i] + n] = std::move(error);
}

void FaultInjectionEnv::FailAlways(Op op, Status error) {
  std::lock_guard<std::mutex> guard(state_->mu);
  state_->always[OpIndex(op)] = true;
  state_->always_error[OpIndex(op)] = std::move(error);
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

Status FaultInjectionEnv::MaybeFail(Op op) {
  std::lock_guard<std::mutex> guard(state_->mu);
  size_t i = OpIndex(op);
  int call = ++state_->counts[i];
  bool fail = state_->always[i];
  Status error = state_->always_error[i];
  if (auto it = state_->nth[i].find(call); it != state_->nth[i].end()) {
    fail = true;
    error = std::move(it->second);
    state_->nth[i].erase(it);
  }
  if (!fail) return Status::OK();
  if (!error.ok()) return error;
  return Status::IOError("injected fault: " + std::string(OpName(op)) + " call " +
                         std::to_string(call));
}

Result<std::shared_ptr<const ReadableFile>> FaultInjectionEnv::OpenReadable(
    const std::string& path) {
  return base_->OpenReadable(path);
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(const std::string& path) {
  KV_RETURN_IF_ERROR(MaybeFail(Op::kNewWritable));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(std::make_unique<WrappedFile>(this, std::move(file)));
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  KV_RETURN_IF_ERROR(MaybeFail(Op::kRename));
  return base_->RenameFile(from, to);
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) { return base_->RemoveFile(path); }

bool FaultInjectionEnv::FileExists(const std::string& path) { return base_->FileExists(path); }

Result<uint64_t> FaultInjectionEnv::GetFileSize(const std::string& path) {
  return base_->GetFileSize(path);
}

Result<std::vector<std::string>> FaultInjectionEnv::GetChildren(const std::string& dir) {
  return base_->GetChildren(dir);
}

Status FaultInjectionEnv::CreateDir(const std::string& dir) { return base_->CreateDir(dir); }

Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  KV_RETURN_IF_ERROR(MaybeFail(Op::kSyncDir));
  return base_->SyncDir(dir);
}

Result<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(const std::string& path) {
  return base_->LockFile(path);
}

bool FaultInjectionEnv::ProcessAlive(int64_t pid) { return base_->ProcessAlive(pid); }

int64_t FaultInjectionEnv::ProcessId() { return base_->ProcessId(); }

}  // namespace kvstore
