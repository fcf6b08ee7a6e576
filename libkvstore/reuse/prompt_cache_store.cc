#include "kvstore/prompt_cache_store.h"

#include <charconv>
#include <cstdio>

#include "kvstore/prompt_cache_file.h"
#include "kvstore/sha256.h"

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
    bytes_ -= victim->second.bytes;
    index_.erase(victim);
  }
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
