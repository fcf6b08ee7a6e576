// The fixture of the PromptCacheStore tests: a store in an in-memory Env,
// caches whose content depends on a seed, and ways to tamper with the
// store's files and manifest.
#ifndef KVSTORE_TESTS_PROMPT_CACHE_STORE_TESTUTIL_H_
#define KVSTORE_TESTS_PROMPT_CACHE_STORE_TESTUTIL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/prompt_cache_store.h"
#include "prompt_cache_testutil.h"

namespace kvstore::testing {

using Tokens = std::vector<int32_t>;

inline constexpr char kDir[] = "/store";

// One KVCache layer of `tokens` tokens whose content depends on `seed`.
inline PromptCache CacheOf(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  Array k = testing::RandomArray(DType::kF16, {1, 2, tokens, 8}, seed);
  Array v = testing::RandomArray(DType::kF16, {1, 2, tokens, 8}, seed + 1000);
  EXPECT_OK(kv->UpdateAndFetch(k, v));
  return {kv};
}

// Opening the file `unreadable` fails with IOError (a read error, maybe
// transient).
class UnreadableEnv : public FaultInjectionEnv {
 public:
  using FaultInjectionEnv::FaultInjectionEnv;
  Result<std::shared_ptr<const ReadableFile>> OpenReadable(const std::string& path) override {
    if (path == unreadable) return Status::IOError(path + ": injected read error");
    return FaultInjectionEnv::OpenReadable(path);
  }
  std::string unreadable;
};

class PromptCacheStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<PromptCacheStore> OpenStore(StoreOpenReport* report = nullptr, int64_t max_bytes = int64_t{1} << 30) {
    PromptCacheStoreOptions options;
    options.max_bytes = max_bytes;
    return OpenStoreWith(options, report);
  }
  std::unique_ptr<PromptCacheStore> OpenStoreWith(const PromptCacheStoreOptions& options,
                                                  StoreOpenReport* report = nullptr) {
    Result<std::unique_ptr<PromptCacheStore>> store = PromptCacheStore::Open(env_.get(), kDir, options, report);
    EXPECT_OK(store);
    if (!store.ok()) return nullptr;
    EXPECT_OK((*store)->WaitUntilIndexed().status());  // the tests below look at an indexed store
    return std::move(store).value();
  }

  // Puts each key with the cache CacheOf(size, seed) and closes the store.
  void PutAll(const std::vector<std::pair<Tokens, uint64_t>>& entries) {
    std::unique_ptr<PromptCacheStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (const auto& [tokens, seed] : entries) {
      ASSERT_OK(store->Put("m", tokens, CacheOf(static_cast<int64_t>(tokens.size()), seed)));
    }
  }

  // The store file whose metadata holds these tokens (read from the file).
  std::string FileOf(const Tokens& tokens) {
    std::string text;
    for (int32_t t : tokens) {
      if (!text.empty()) text += ',';
      text += std::to_string(t);
    }
    Result<std::vector<std::string>> names = env_->GetChildren(kDir);
    EXPECT_OK(names);
    if (!names.ok()) return "";
    for (const std::string& name : *names) {
      if (!name.ends_with(".safetensors")) continue;
      Result<PromptCacheInfo> info = ReadPromptCacheInfo(env_.get(), std::string(kDir) + "/" + name);
      if (!info.ok()) continue;
      for (const auto& [k, v] : info->user_metadata) {
        if (k == "kvstore_tokens" && v == text) return name;
      }
    }
    ADD_FAILURE() << "no store file holds tokens " << text;
    return "";
  }

  std::string Path(const std::string& name) const { return std::string(kDir) + "/" + name; }

  // Flips a bit of a tensor byte of the store file `name` (digests then fail).
  void CorruptTensorByte(const std::string& name) {
    std::vector<std::byte> bytes = testing::FileBytes(env_.get(), Path(name));
    bytes[bytes.size() - 3] ^= std::byte{0x40};
    ASSERT_OK(WriteStringAtomic(env_.get(), Path(name), bytes));
  }

  void Rename(const std::string& from, const std::string& to) { ASSERT_OK(env_->RenameFile(Path(from), Path(to))); }

  void Swap(const std::string& a, const std::string& b) {
    Rename(a, "swap.tmp");
    Rename(b, a);
    Rename("swap.tmp", b);
  }

  std::string Manifest() {
    const std::vector<std::byte> bytes = testing::FileBytes(env_.get(), Path("MANIFEST"));
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  void SetManifest(const std::string& text) {
    ASSERT_OK(WriteStringAtomic(env_.get(), Path("MANIFEST"), std::as_bytes(std::span(text))));
  }

  // Fetches `query`; the hit's length, or -1 on a miss. `fingerprint`
  // receives the served layer's fingerprint.
  int64_t Fetch(PromptCacheStore& store, const Tokens& query, std::string* fingerprint = nullptr) {
    Result<std::optional<PromptCacheStore::Hit>> hit = store.FetchLongestPrefix("m", query);
    EXPECT_OK(hit);
    if (!hit.ok() || !hit->has_value()) return -1;
    if (fingerprint) *fingerprint = Fingerprint(*(*hit)->cache.at(0));
    return (*hit)->length;
  }

  static std::string Want(int64_t tokens, uint64_t seed) { return Fingerprint(*CacheOf(tokens, seed)[0]); }

  std::unique_ptr<Env> env_ = NewMemEnv();
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_PROMPT_CACHE_STORE_TESTUTIL_H_
