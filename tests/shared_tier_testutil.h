// Helpers for the shared tier's tests: caches of every class filled with
// random rows, a SharedPromptCache over a backend, cache comparison.
#ifndef KVSTORE_TESTS_SHARED_TIER_TESTUTIL_H_
#define KVSTORE_TESTS_SHARED_TIER_TESTUTIL_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kvstore/cache_list.h"
#include "kvstore/kv_backend.h"
#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/shared_prompt_cache.h"
#include "prompt_cache_testutil.h"

namespace kvstore::testing {

using Tokens = std::vector<int32_t>;

inline Tokens Iota(int64_t n, int32_t first = 1000) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Appends `tokens` random positions to an attention cache (H heads, D dims,
// F16) in updates of at most `step` tokens. A QuantizedKVCache quantizes
// them.
inline void Prefill(Cache& cache, int64_t tokens, int64_t step, uint64_t seed, int64_t heads = 2, int64_t dim = 32) {
  for (int64_t done = 0; done < tokens;) {
    const int64_t s = std::min(step, tokens - done);
    Array k = RandomArray(DType::kF16, {1, heads, s, dim}, seed * 7919 + static_cast<uint64_t>(done) * 2);
    Array v = RandomArray(DType::kF16, {1, heads, s, dim}, seed * 7919 + static_cast<uint64_t>(done) * 2 + 1);
    if (auto* q = dynamic_cast<QuantizedKVCache*>(&cache)) {
      ASSERT_OK(q->UpdateAndFetchQuantized(k, v));
    } else {
      ASSERT_OK(cache.UpdateAndFetch(k, v));
    }
    done += s;
  }
}

// Every layer's class, meta state, offset and state digests.
inline std::string Describe(const PromptCache& cache) {
  std::string out;
  for (const auto& layer : cache) out += Fingerprint(*layer) + "\n";
  return out;
}

inline PromptCache CopyOf(const PromptCache& cache) {
  PromptCache out;
  for (const auto& layer : cache) out.push_back(std::shared_ptr<Cache>(layer->Copy()));
  return out;
}

// The tokens a cache holds: its largest offset, CacheList children
// included (0 for caches without one).
inline int64_t TokensHeld(const PromptCache& cache) {
  int64_t n = 0;
  std::function<void(const Cache&)> visit = [&](const Cache& c) {
    if (const auto* list = dynamic_cast<const CacheList*>(&c)) {
      for (size_t i = 0; i < list->num_children(); ++i) visit(*list->child(i));
    } else {
      n = std::max(n, c.offset().value_or(0));
    }
  };
  for (const auto& layer : cache) visit(*layer);
  return n;
}

// The cache trimmed (trim_prompt_cache) to its first `tokens` tokens.
inline PromptCache TrimmedTo(const PromptCache& cache, int64_t tokens) {
  PromptCache out = CopyOf(cache);
  const int64_t have = TokensHeld(out);
  EXPECT_TRUE(TrimPromptCache(out, have - tokens).ok());
  return out;
}

// `secret` "": no seal.
inline std::unique_ptr<SharedPromptCache> OpenTier(KvBackend* backend, int64_t chunk_tokens,
                                                   std::string secret = "", bool async = false,
                                                   std::string writer = "test-writer") {
  SharedPromptCacheOptions options{.backend = backend,
                                   .chunk_tokens = chunk_tokens,
                                   .secret = secret.empty() ? std::nullopt : std::optional<std::string>(secret),
                                   .writer_id = std::move(writer),
                                   .async_insert = async};
  Result<std::unique_ptr<SharedPromptCache>> tier = SharedPromptCache::Open(std::move(options));
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// The value of `key` ("" and a failure when absent).
inline std::string ValueOf(KvBackend& backend, const std::string& key) {
  auto v = backend.Get(std::vector<std::string>{key});
  EXPECT_TRUE(v.ok() && (*v)[0].has_value()) << key;
  return v.ok() && (*v)[0] ? *(*v)[0] : "";
}
// `key` made to hold `value`, as a writer behind the tier's back would.
inline void ReplaceValue(KvBackend& backend, const std::string& key, const std::string& value) {
  ASSERT_OK(backend.Delete(std::vector<std::string>{key}));
  ASSERT_OK(backend.PutIfAbsent(std::vector<KvPut>{{key, value}}));
}

inline ModelFingerprint FingerprintOf(const PromptCache& cache, const std::string& model = "test-model") {
  Result<ModelFingerprint> fp = ModelFingerprint::Of(model, cache);
  EXPECT_TRUE(fp.ok()) << fp.status().ToString();
  return std::move(fp).value();
}

// A one-layer cache of `tokens` random F16 rows (keys = values), and the
// fingerprint of such caches under the model id "m".
inline PromptCache OneLayerPrompt(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  Array k = RandomArray(DType::kF16, {1, 1, tokens, 8}, seed);
  EXPECT_TRUE(kv->UpdateAndFetch(k, k).ok());
  return {kv};
}
inline const ModelFingerprint& OneLayerModel() {
  static const ModelFingerprint fp = FingerprintOf(OneLayerPrompt(1, 0), "m");
  return fp;
}

// A KvBackend over another that can fail every call, hold every call until
// Release() (a stalled server), or answer batches with one result too few
// (a broken backend).
class FaultyBackend : public KvBackend {
 public:
  explicit FaultyBackend(KvBackend* base) : base_(base) {}
  void FailAll(bool fail) { fail_ = fail; }
  void ShortResults(bool short_results) { short_ = short_results; }
  void Hold() {
    std::lock_guard<std::mutex> l(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  int calls() const { return calls_; }

  using KvBackend::Get;
  Result<std::vector<std::optional<std::string>>> Get(std::span<const std::string> keys,
                                                      std::vector<bool>* other_type) override {
    KV_RETURN_IF_ERROR(Enter());
    return Shorten(base_->Get(keys, other_type));
  }
  Result<std::optional<std::string>> GetRange(std::string_view key, int64_t start, int64_t length) override {
    KV_RETURN_IF_ERROR(Enter());
    return base_->GetRange(key, start, length);
  }
  Result<std::vector<bool>> Exists(std::span<const std::string> keys) override {
    KV_RETURN_IF_ERROR(Enter());
    return Shorten(base_->Exists(keys));
  }
  Result<std::vector<bool>> PutIfAbsent(std::span<const KvPut> items) override {
    KV_RETURN_IF_ERROR(Enter());
    return Shorten(base_->PutIfAbsent(items));
  }
  Status Delete(std::span<const std::string> keys) override {
    KV_RETURN_IF_ERROR(Enter());
    return base_->Delete(keys);
  }
  Result<bool> DeleteIfEquals(std::string_view key, std::string_view expected) override {
    KV_RETURN_IF_ERROR(Enter());
    return base_->DeleteIfEquals(key, expected);
  }
  Result<bool> DeleteIfOtherType(std::string_view key) override {
    KV_RETURN_IF_ERROR(Enter());
    return base_->DeleteIfOtherType(key);
  }
  Result<std::vector<std::string>> Scan(std::string_view prefix, size_t limit) override {
    KV_RETURN_IF_ERROR(Enter());
    return base_->Scan(prefix, limit);
  }
  std::string Describe() const override { return "faulty " + base_->Describe(); }

 private:
  Status Enter() {
    ++calls_;
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !held_; });
    if (fail_) return Status::IOError("redis 127.0.0.1:1: timeout after 50 ms (injected)");
    return Status::OK();
  }
  template <typename T>
  Result<std::vector<T>> Shorten(Result<std::vector<T>> r) {
    if (short_ && r.ok() && !r->empty()) r->pop_back();
    return r;
  }
  KvBackend* base_;
  std::atomic<bool> fail_{false};
  std::atomic<bool> short_{false};
  std::atomic<int> calls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_SHARED_TIER_TESTUTIL_H_
