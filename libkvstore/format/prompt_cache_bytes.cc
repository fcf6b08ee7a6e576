// Prompt-cache files held in a string: the writer appends to a string
// instead of a temp file, and readers open the string through a one-file
// read-only Env.
#include "kvstore/prompt_cache_bytes.h"

#include <cstring>

#include "libkvstore/format/bytes_io.h"

namespace kvstore {
namespace {

constexpr char kMemoryPath[] = "(in memory)";

class StringWritableFile final : public WritableFile {
 public:
  explicit StringWritableFile(std::string& out) : out_(out) {}
  Status Append(std::span<const std::byte> data) override {
    out_.append(reinterpret_cast<const char*>(data.data()), data.size());
    return Status::OK();
  }
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    if (offset > out_.size() || data.size() > out_.size() - offset) {
      return Status::InvalidArgument("in-memory write beyond the appended bytes");
    }
    if (!data.empty()) std::memcpy(out_.data() + offset, data.data(), data.size());
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }
  uint64_t size() const override { return out_.size(); }

 private:
  std::string& out_;
};

class StringReadableFile final : public ReadableFile {
 public:
  explicit StringReadableFile(std::shared_ptr<const std::string> bytes)
      : ReadableFile(kMemoryPath), bytes_(std::move(bytes)) {}
  std::span<const std::byte> data() const override {
    return {reinterpret_cast<const std::byte*>(bytes_->data()), bytes_->size()};
  }

 private:
  std::shared_ptr<const std::string> bytes_;
};

// An Env holding one read-only file, the bytes, under kMemoryPath.
class BytesEnv final : public Env {
 public:
  explicit BytesEnv(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)) {}

  Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override {
    if (path != kMemoryPath) return Status::NotFound(path);
    return std::shared_ptr<const ReadableFile>(std::make_shared<StringReadableFile>(bytes_));
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override { return ReadOnly(path); }
  Status RenameFile(const std::string& from, const std::string&) override { return ReadOnly(from); }
  Status RemoveFile(const std::string& path) override { return ReadOnly(path); }
  bool FileExists(const std::string& path) override { return path == kMemoryPath; }
  Result<uint64_t> GetFileSize(const std::string& path) override {
    if (path != kMemoryPath) return Status::NotFound(path);
    return static_cast<uint64_t>(bytes_->size());
  }
  Result<FileStat> Stat(const std::string& path) override {
    if (path != kMemoryPath) return Status::NotFound(path);
    return FileStat{.size = bytes_->size(), .is_regular = true};
  }
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override { return ReadOnly(dir); }
  Status CreateDir(const std::string& dir) override { return ReadOnly(dir); }
  Status SyncDir(const std::string& dir) override { return ReadOnly(dir); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override { return ReadOnly(path); }

 private:
  static Status ReadOnly(const std::string& path) {
    return Status::NotSupported("'" + path + "': in-memory prompt-cache bytes are read-only");
  }
  std::shared_ptr<const std::string> bytes_;
};

}  // namespace

Result<std::string> SaveLayersToString(size_t num_layers, const LayerSource& source, const Metadata& user_metadata,
                                       const SavePromptCacheOptions& options, const WriterHooks& hooks,
                                       size_t reserve) {
  std::string out;
  out.reserve(reserve);
  StringWritableFile file(out);
  KV_RETURN_IF_ERROR(SaveLayersTo(file, num_layers, source, user_metadata, options, hooks));
  return out;
}

Result<std::string> SavePromptCacheToString(const PromptCache& cache, const Metadata& user_metadata,
                                            const SavePromptCacheOptions& options) {
  return SaveLayersToString(
      cache.size(), [&](size_t i) -> Result<std::shared_ptr<const Cache>> { return cache[i]; }, user_metadata,
      options, {});
}

Result<std::unique_ptr<PromptCacheReader>> OpenPromptCacheReader(std::shared_ptr<const std::string> bytes,
                                                                 const PromptCacheReader::Options& options) {
  BytesEnv env(std::move(bytes));
  return PromptCacheReader::Open(&env, kMemoryPath, options);
}

Result<LoadedPromptCache> LoadPromptCacheFromString(std::shared_ptr<const std::string> bytes,
                                                    const LoadPromptCacheOptions& options) {
  BytesEnv env(std::move(bytes));
  return LoadPromptCache(&env, kMemoryPath, options);
}

}  // namespace kvstore
