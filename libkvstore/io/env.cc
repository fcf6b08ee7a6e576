#include "kvstore/env.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "libkvstore/io/memory_file.h"

namespace kvstore {

std::shared_ptr<Storage> ReadableFile::AsStorage() const {
  std::span<const std::byte> bytes = data();
  return Storage::WrapReadOnly(bytes.data(), bytes.size(), shared_from_this());
}

Status ReadableFile::ReadAt(uint64_t offset, std::span<std::byte> out) const {
  const std::span<const std::byte> bytes = data();
  if (offset > bytes.size() || out.size() > bytes.size() - offset) {
    return Status::InvalidArgument("read past the end of '" + path() + "'");
  }
  if (!out.empty()) std::memcpy(out.data(), bytes.data() + offset, out.size());
  return Status::OK();
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  size_t end = path.find_last_not_of('/', slash);
  if (end == std::string::npos) return "/";
  return path.substr(0, end + 1);
}

bool Env::ProcessAlive(int64_t pid) {
  // kill(0) and kill(-n) address process groups, so only positive ids that
  // fit pid_t are meaningful here.
  if (pid <= 0 || pid > INT_MAX) return false;
  // EPERM means the process exists but belongs to another user.
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

int64_t Env::ProcessId() { return getpid(); }

Status Env::AppendToFile(const std::string& path, std::span<const std::byte> data, bool sync) {
  std::shared_ptr<const ReadableFile> old;
  if (Result<std::shared_ptr<const ReadableFile>> r = OpenReadable(path); r.ok()) {
    old = std::move(r).value();
  } else if (r.status().code() != StatusCode::kNotFound) {
    return r.status();
  }
  return WriteFileAtomic(
      this, path,
      [&](WritableFile& file) -> Status {
        if (old != nullptr) KV_RETURN_IF_ERROR(file.Append(old->data()));
        return file.Append(data);
      },
      AtomicWriteOptions{.durability = sync ? Durability::kAlways : Durability::kNone});
}

Result<std::string> Env::ReplaceTarget(const std::string& path) { return path; }

Result<std::shared_ptr<const ReadableFile>> Env::ReadIntoMemory(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const ReadableFile> file, OpenReadable(path));
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Storage> copy, AllocateFileCopy(path, file->size()));
  if (file->size() > 0) std::memcpy(copy->mutable_data(), file->data().data(), file->size());
  return std::shared_ptr<const ReadableFile>(std::make_shared<MemoryFile>(path, std::move(copy)));
}

}  // namespace kvstore
