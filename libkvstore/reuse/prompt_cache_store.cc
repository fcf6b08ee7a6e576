#include "kvstore/prompt_cache_store.h"

#include <charconv>
#include <cstdio>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/integrity/sha256.h"

namespace kvstore {

namespace {
constexpr char kModelKey[] = "kvstore_model";
constexpr char kTokensKey[] = "kvstore_tokens";
constexpr char kSuffix[] = ".safetensors";

std::string TokensText(std::span<const int32_t> tokens) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(tokens[i]);
  }
  return out;
}

std::optional<std::vector<int32_t>> ParseTokens(std::string_view s) {
  std::vector<int32_t> out;
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string_view part = s.substr(0, comma);
    int32_t v;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec != std::errc() || p != part.data() + part.size()) return std::nullopt;
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

// MANIFEST lines: "+ <file> <bytes> <model-hex> <tokens>" or "- <file>".
std::string Hex(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out.empty() ? "-" : out;
}

std::optional<std::string> Unhex(std::string_view s) {
  if (s == "-") return std::string();
  if (s.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < s.size(); i += 2) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = nib(s[i]), lo = nib(s[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi << 4 | lo);
  }
  return out;
}

struct ManifestEntry {
  std::string model;
  std::vector<int32_t> tokens;
  int64_t bytes = 0;
};

// Parses the manifest leniently: malformed lines are ignored (it is a hint).
std::map<std::string, ManifestEntry> ReadManifest(std::span<const std::byte> data) {
  std::map<std::string, ManifestEntry> out;
  std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) break;  // a torn last line
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    std::vector<std::string_view> parts;
    while (!line.empty()) {
      const size_t sp = line.find(' ');
      parts.push_back(line.substr(0, sp));
      if (sp == std::string_view::npos) break;
      line.remove_prefix(sp + 1);
    }
    if (parts.size() == 2 && parts[0] == "-") {
      out.erase(std::string(parts[1]));
    } else if (parts.size() == 5 && parts[0] == "+") {
      int64_t bytes = 0;
      auto [p, ec] = std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), bytes);
      auto model = Unhex(parts[3]);
      auto tokens = ParseTokens(parts[4] == "-" ? std::string_view() : parts[4]);
      if (ec != std::errc() || !model || !tokens) continue;
      out[std::string(parts[1])] = ManifestEntry{*model, *tokens, bytes};
    }
  }
  return out;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::string PromptCacheStore::Key(const std::string& model, std::span<const int32_t> tokens) {
  return model + '\n' + TokensText(tokens);
}

PromptCacheStore::PromptCacheStore(Env* env, std::string dir, PromptCacheStoreOptions options,
                                   std::unique_ptr<FileLock> lock)
    : env_(env), dir_(std::move(dir)), options_(options), lock_(std::move(lock)) {}

PromptCacheStore::~PromptCacheStore() = default;

Result<std::unique_ptr<PromptCacheStore>> PromptCacheStore::Open(Env* env, const std::string& dir,
                                                                 const PromptCacheStoreOptions& options,
                                                                 StoreOpenReport* report) {
  KV_RETURN_IF_ERROR(env->CreateDir(dir));
  Result<std::unique_ptr<FileLock>> lock = env->LockFile(dir + "/LOCK");
  if (!lock.ok()) return lock.status().WithPrefix("prompt-cache store " + dir);
  std::unique_ptr<PromptCacheStore> store(new PromptCacheStore(env, dir, options, std::move(lock).value()));
  KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
  StoreOpenReport local;
  StoreOpenReport& r = report ? *report : local;
  std::map<std::string, ManifestEntry> manifest;
  if (auto m = env->OpenReadable(dir + "/MANIFEST"); m.ok()) manifest = ReadManifest((*m)->data());
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    if (name.find(".kvtmp-") != std::string::npos) {
      (void)env->RemoveFile(path);  // we own the directory: no live writer
      continue;
    }
    if (!EndsWith(name, kSuffix)) continue;
    auto drop = [&](const std::string& why) {
      r.dropped.push_back(name + ": " + why);
      (void)env->RemoveFile(path);
    };
    // Listed in the manifest with the same size: index without reading it
    // (served files are verified anyway).
    if (auto it = manifest.find(name); it != manifest.end()) {
      Result<uint64_t> size = env->GetFileSize(path);
      if (size.ok() && static_cast<int64_t>(*size) == it->second.bytes) {
        store->bytes_ += it->second.bytes;
        store->index_[Key(it->second.model, it->second.tokens)] = Entry{name, it->second.bytes, store->clock_++};
        ++r.entries;
        ++r.from_manifest;
        continue;
      }
    }
    Result<PromptCacheInfo> info = ReadPromptCacheInfo(env, path);
    if (!info.ok()) {
      drop(std::string(info.status().ToString()));
      continue;
    }
    std::optional<std::string> model;
    std::optional<std::vector<int32_t>> tokens;
    for (const auto& [k, v] : info->user_metadata) {
      if (k == kModelKey) model = v;
      if (k == kTokensKey) tokens = ParseTokens(v);
    }
    if (!model || !tokens || !info->has_digests) {
      drop("not a store entry (no model/tokens keys or no digests)");
      continue;
    }
    Entry e{name, static_cast<int64_t>(info->file_bytes), store->clock_++};
    store->bytes_ += e.bytes;
    store->index_[Key(*model, *tokens)] = e;
    ++r.entries;
  }
  std::lock_guard<std::mutex> l(store->mu_);
  // Compact the manifest: one "+" line per indexed entry, then append.
  KV_ASSIGN_OR_RETURN(store->manifest_, env->NewWritableFile(dir + "/MANIFEST"));
  for (const auto& [key, e] : store->index_) {
    const size_t nl = key.find('\n');
    auto tokens = ParseTokens(std::string_view(key).substr(nl + 1));
    store->LogLocked('+', e.file, key.substr(0, nl), tokens ? *tokens : std::vector<int32_t>{}, e.bytes);
  }
  store->EvictLocked();
  return store;
}

Status PromptCacheStore::Put(const std::string& model, std::span<const int32_t> tokens, const PromptCache& cache) {
  const std::string key = Key(model, tokens);
  const std::string name = Sha256(std::string_view(key)).ToHex().substr(0, 16) + kSuffix;
  KV_RETURN_IF_ERROR(SavePromptCache(env_, dir_ + "/" + name, cache,
                                     {{kModelKey, model}, {kTokensKey, TokensText(tokens)}}));
  KV_ASSIGN_OR_RETURN(uint64_t size, env_->GetFileSize(dir_ + "/" + name));
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) bytes_ -= it->second.bytes;
  index_[key] = Entry{name, static_cast<int64_t>(size), clock_++};
  bytes_ += static_cast<int64_t>(size);
  LogLocked('+', name, model, tokens, static_cast<int64_t>(size));
  EvictLocked();
  return Status::OK();
}

void PromptCacheStore::EvictLocked() {
  while (bytes_ > options_.max_bytes && !index_.empty()) {
    auto victim = index_.begin();
    for (auto it = index_.begin(); it != index_.end(); ++it) {
      if (it->second.last_use < victim->second.last_use) victim = it;
    }
    (void)env_->RemoveFile(dir_ + "/" + victim->second.file);
    LogLocked('-', victim->second.file, "", {}, 0);
    bytes_ -= victim->second.bytes;
    index_.erase(victim);
  }
}

void PromptCacheStore::LogLocked(char op, const std::string& file, const std::string& model,
                                 std::span<const int32_t> tokens, int64_t bytes) {
  if (manifest_ == nullptr) return;
  std::string line = op == '+' ? "+ " + file + " " + std::to_string(bytes) + " " + Hex(model) + " " +
                                     (tokens.empty() ? std::string("-") : TokensText(tokens)) + "\n"
                               : "- " + file + "\n";
  // The manifest is a hint: a failed append only costs a slower next start.
  if (manifest_->Append(std::as_bytes(std::span(line))).ok()) (void)manifest_->Sync();
}

Result<std::optional<PromptCacheStore::Hit>> PromptCacheStore::FetchLongestPrefix(
    const std::string& model, std::span<const int32_t> tokens) {
  for (size_t len = tokens.size(); len >= 1; --len) {
    const std::string key = Key(model, tokens.first(len));
    std::string file;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = index_.find(key);
      if (it == index_.end()) continue;
      it->second.last_use = clock_++;
      file = it->second.file;
    }
    LoadPromptCacheOptions options;
    options.verify = true;
    Result<LoadedPromptCache> loaded = LoadPromptCache(env_, dir_ + "/" + file, options);
    if (!loaded.ok()) {
      // A bad file is a miss, never wrong KV: forget it and keep looking.
      std::lock_guard<std::mutex> l(mu_);
      auto it = index_.find(key);
      if (it != index_.end() && it->second.file == file) {
        bytes_ -= it->second.bytes;
        index_.erase(it);
        (void)env_->RemoveFile(dir_ + "/" + file);
        LogLocked('-', file, "", {}, 0);
        ++corrupt_dropped_;
      }
      continue;
    }
    return std::optional<Hit>(Hit{std::move(loaded->cache), static_cast<int64_t>(len)});
  }
  return std::optional<Hit>();
}

int64_t PromptCacheStore::entries() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int64_t>(index_.size());
}
int64_t PromptCacheStore::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}
int64_t PromptCacheStore::corrupt_dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return corrupt_dropped_;
}

}  // namespace kvstore
