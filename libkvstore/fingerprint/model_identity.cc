#include "kvstore/model_identity.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "libkvstore/integrity/sha256.h"
#include "libkvstore/util/parallel.h"

namespace kvstore {
namespace {

constexpr std::string_view kModelFileSuffixes[] = {".safetensors", ".json",     ".npz",   ".gguf", ".bin",
                                                   ".model",       ".tiktoken", ".jinja", ".txt"};
// The cache file is a hint: a larger one is ignored rather than read.
constexpr uint64_t kMaxCacheFileBytes = 16 << 20;
constexpr int kCacheFileVersion = 1;

bool IsModelFile(std::string_view name) {
  if (name.empty() || name.front() == '.') return false;
  return std::any_of(std::begin(kModelFileSuffixes), std::end(kModelFileSuffixes),
                     [&](std::string_view suffix) { return name.ends_with(suffix); });
}

// What the cache remembers a file by: its digest is reused while these match.
struct FileVersion {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileVersion&) const = default;
};

struct CachedDigest {
  FileVersion version;
  std::string sha256;  // 64 hex digits
};

bool IsHexDigest(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The cache file's entries; an empty map for anything malformed.
std::map<std::string, CachedDigest> ParseCacheFile(std::string_view text) {
  std::map<std::string, CachedDigest> out;
  Result<Json> json = Json::Parse(text);
  if (!json.ok() || !json->is_object()) return out;
  const Json* version = json->Find("version");
  const Json* files = json->Find("files");
  if (version == nullptr || !version->is_integer() || version->as_int() != kCacheFileVersion ||
      files == nullptr || !files->is_object()) {
    return out;
  }
  for (const auto& [path, entry] : files->as_object()) {
    const Json* size = entry.Find("size");
    const Json* mtime = entry.Find("mtime_ns");
    const Json* sha = entry.Find("sha256");
    if (size == nullptr || mtime == nullptr || sha == nullptr || size->type() != Json::Type::kInt ||
        mtime->type() != Json::Type::kInt || !sha->is_string() || !IsHexDigest(sha->as_string()) ||
        size->as_int() < 0) {
      return {};
    }
    out[path] = {{static_cast<uint64_t>(size->as_int()), mtime->as_int()}, sha->as_string()};
  }
  return out;
}

std::string CacheFileText(const std::map<std::string, CachedDigest>& digests) {
  Json files = Json::MakeObject();
  for (const auto& [path, d] : digests) {
    Json entry = Json::MakeObject();
    entry["size"] = Json(static_cast<int64_t>(d.version.size));
    entry["mtime_ns"] = Json(d.version.mtime_ns);
    entry["sha256"] = Json(d.sha256);
    files[path] = std::move(entry);
  }
  Json root = Json::MakeObject();
  root["version"] = Json(kCacheFileVersion);
  root["files"] = std::move(files);
  return root.Dump() + "\n";
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.ends_with('/') ? dir + name : dir + "/" + name;
}

}  // namespace

struct ModelContentDigests::Impl {
  Env* env;
  std::string cache_file;
  std::mutex mu;
  bool loaded = false;                              // GUARDED_BY(mu)
  std::map<std::string, CachedDigest> by_path;      // GUARDED_BY(mu)
  int64_t files_hashed = 0;                         // GUARDED_BY(mu)

  // REQUIRES: mu held.
  void LoadOnce() {
    if (loaded || cache_file.empty()) return;
    loaded = true;
    Result<Env::FileStat> st = env->Stat(cache_file);
    if (!st.ok() || !st->is_regular || st->size > kMaxCacheFileBytes) return;
    Result<std::shared_ptr<const ReadableFile>> file = env->OpenReadable(cache_file);
    if (!file.ok()) return;
    const std::span<const std::byte> bytes = (*file)->data();
    by_path = ParseCacheFile(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }

  // The SHA-256 of one file's bytes, from the cache while its version holds.
  Result<std::string> FileDigest(const std::string& path, const FileVersion& version, bool& hashed) {
    {
      std::lock_guard<std::mutex> guard(mu);
      LoadOnce();
      auto it = by_path.find(path);
      if (it != by_path.end() && it->second.version == version) return it->second.sha256;
    }
    Result<std::shared_ptr<const ReadableFile>> file = env->OpenReadable(path);
    if (!file.ok()) return file.status().WithPrefix("model file");
    // The file may have changed since it was stat'ed: remember the digest
    // under the size actually read only when that is the size stat gave.
    const std::string sha = Sha256((*file)->data()).ToHex();
    if ((*file)->data().size() != version.size) {
      return Status::IOError("model file " + path + " changed while it was read");
    }
    std::lock_guard<std::mutex> guard(mu);
    by_path[path] = {version, sha};
    ++files_hashed;
    hashed = true;
    return sha;
  }

  void SaveCacheFile() {
    if (cache_file.empty()) return;
    std::string text;
    {
      std::lock_guard<std::mutex> guard(mu);
      text = CacheFileText(by_path);
    }
    // A hint: a failed write costs a re-hash after the next restart.
    (void)WriteStringAtomic(env, cache_file,
                            std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
};

ModelContentDigests::ModelContentDigests(Env* env, std::string cache_file) : impl_(std::make_unique<Impl>()) {
  impl_->env = env;
  impl_->cache_file = std::move(cache_file);
}

ModelContentDigests::~ModelContentDigests() = default;

int64_t ModelContentDigests::files_hashed() const {
  std::lock_guard<std::mutex> guard(impl_->mu);
  return impl_->files_hashed;
}

Result<std::string> ModelContentDigests::Of(const std::string& path) {
  Env* env = impl_->env;
  Result<Env::FileStat> stat = env->Stat(path);
  // Any stat failure (no such file, a component that is a file, no access)
  // means no model the process could load is there.
  if (!stat.ok()) return Status::NotFound(std::string(stat.status().message()));
  const Env::FileStat& st = *stat;
  struct ModelFile {
    std::string name;
    std::string path;
    FileVersion version;
    std::string sha256;
  };
  std::vector<ModelFile> files;
  if (st.is_directory) {
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(path));
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      if (!IsModelFile(name)) continue;
      const std::string child = JoinPath(path, name);
      Result<Env::FileStat> cst = env->Stat(child);
      if (!cst.ok() || !cst->is_regular) continue;  // a subdirectory, a dangling link
      files.push_back({name, child, {cst->size, cst->mtime_ns}, {}});
    }
  } else if (st.is_regular) {
    const size_t slash = path.find_last_of('/');
    files.push_back({slash == std::string::npos ? path : path.substr(slash + 1), path, {st.size, st.mtime_ns}, {}});
  } else {
    return Status::InvalidArgument("model path " + path + " is neither a file nor a directory");
  }
  std::vector<char> hashed(files.size(), 0);
  KV_RETURN_IF_ERROR(ParallelFor(files.size(), 0, [&](size_t i) -> Status {
    bool h = false;
    KV_ASSIGN_OR_RETURN(files[i].sha256, impl_->FileDigest(files[i].path, files[i].version, h));
    hashed[i] = h;
    return Status::OK();
  }));
  if (std::find(hashed.begin(), hashed.end(), 1) != hashed.end()) impl_->SaveCacheFile();
  // The listing, not the paths: a copy elsewhere has the same one.
  Sha256Hasher listing;
  listing.Update(std::string_view("kvstore-model-content/1\n"));
  for (const ModelFile& f : files) {
    listing.Update(f.name + '\0' + std::to_string(f.version.size) + '\0' + f.sha256 + '\n');
  }
  return "sha256:" + listing.Finish().ToHex();
}

namespace {

Result<Json> WithContentDigests(const Json& key, ModelContentDigests& digests, int depth) {
  if (depth > 16) return Status::InvalidArgument("model key nests deeper than 16 levels");
  if (key.is_object()) return Status::InvalidArgument("a model key holds no objects (null, booleans, numbers, strings, arrays)");
  if (key.is_array()) {
    Json out = Json::MakeArray();
    for (const Json& item : key.as_array()) {
      KV_ASSIGN_OR_RETURN(Json v, WithContentDigests(item, digests, depth + 1));
      out.Push(std::move(v));
    }
    return out;
  }
  if (!key.is_string() || key.as_string().empty()) return key;
  Result<std::string> content = digests.Of(key.as_string());
  if (content.ok()) return Json(*content);
  if (content.status().IsNotFound()) return key;  // not a local path: a hub id, a revision
  return content.status();
}

}  // namespace

Result<std::string> ModelIdOfKey(const Json& key, ModelContentDigests& digests) {
  KV_ASSIGN_OR_RETURN(Json named, WithContentDigests(key, digests, 0));
  return std::string(kModelIdPrefix) + named.Dump();
}

}  // namespace kvstore
