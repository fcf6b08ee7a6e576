#include "bench/shared_tier_bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "kvstore/kv_cache.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/redis_backend.h"
#include "kvstore/shared_prompt_cache.h"

namespace kvstore::bench {

KvBackend* BenchBackend() {
  static KvBackend* const backend = []() -> KvBackend* {
    const char* url = std::getenv("KVSTORE_BENCH_REDIS_URL");
    if (url == nullptr || *url == '\0') return NewMemKvBackend().release();
    // Timeouts for big values on a loaded machine; the figures are throughput.
    Result<std::unique_ptr<KvBackend>> redis =
        OpenRedisBackend({.url = url, .command_timeout = std::chrono::milliseconds(5000)});
    if (!redis.ok()) {
      std::fprintf(stderr, "shared tier bench: %s\n", redis.status().ToString().c_str());
      std::exit(2);
    }
    return std::move(redis).value().release();
  }();
  return backend;
}

PromptCache Cache(int64_t layers, int64_t tokens, int64_t heads, int64_t dim) {
  std::mt19937_64 rng(42);
  PromptCache cache;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<uint16_t> k(static_cast<size_t>(heads * tokens * dim)), v(k.size());
    for (auto& x : k) x = static_cast<uint16_t>(rng() & 0x3bff);  // finite F16 values
    for (auto& x : v) x = static_cast<uint16_t>(rng() & 0x3bff);
    auto kv = std::make_shared<KVCache>();
    (void)kv->SetState(CacheState({Array::FromValues<uint16_t>(DType::kF16, {1, heads, tokens, dim}, k),
                                   Array::FromValues<uint16_t>(DType::kF16, {1, heads, tokens, dim}, v)}));
    cache.push_back(kv);
  }
  return cache;
}

std::vector<std::string> ChunkSizedValues(int64_t chunks, int64_t layers, int64_t chunk_tokens, int64_t heads,
                                          int64_t dim) {
  std::unique_ptr<KvBackend> scratch = NewMemKvBackend();
  const PromptCache cache = Cache(layers, chunks * chunk_tokens, heads, dim);
  auto tier = SharedPromptCache::Open({.backend = scratch.get(), .chunk_tokens = chunk_tokens, .secret = "s",
                                       .async_insert = false})
                  .value();
  std::vector<int32_t> tokens(static_cast<size_t>(chunks * chunk_tokens));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  (void)tier->Insert(ModelFingerprint::Of("bench", cache).value(), tokens, cache);
  std::mt19937_64 rng(7);
  std::vector<std::string> out;
  Result<std::vector<std::string>> keys = scratch->Scan("kvstore:v2/", 1 << 20);
  if (!keys.ok()) return out;
  for (const std::string& key : *keys) {
    if (key.find("/c/") == std::string::npos) continue;
    const std::string one[] = {key};
    Result<std::vector<std::optional<std::string>>> got = scratch->Get(one);
    if (!got.ok() || !(*got)[0]) continue;
    std::string value((*got)[0]->size(), '\0');
    for (char& c : value) c = static_cast<char>(rng());
    out.push_back(std::move(value));
  }
  return out;
}

void DeletePrefix(KvBackend& backend, const std::string& prefix) {
  auto keys = backend.Scan(prefix, 1 << 20);
  if (keys.ok() && !keys->empty()) (void)backend.Delete(*keys);
}

std::string TempDir() {
  static const std::string dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvstore-bench-XXXXXX").string();
    const std::string made = mkdtemp(pattern.data()) != nullptr ? pattern : "/tmp/kvstore-bench";
    std::atexit([] { std::filesystem::remove_all(TempDir()); });
    return made;
  }();
  return dir;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace kvstore::bench
