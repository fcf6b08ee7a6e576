// Prompt reuse: an in-memory hit costs O(layers), independent of the cache's
// bytes (copy-on-write fetch), and trie lookups over 100k stored prompts.
#include <benchmark/benchmark.h>

#include <random>

#include "kvstore/kv_cache.h"
#include "kvstore/prompt_trie.h"
#include "kvstore/server_prompt_cache.h"

namespace {

// 32 layers of [1, heads, tokens, 64] F16 keys and values.
kvstore::PromptCache BigCache(int64_t tokens, int64_t heads) {
  kvstore::PromptCache cache;
  for (int l = 0; l < 32; ++l) {
    auto kv = std::make_shared<kvstore::KVCache>();
    kvstore::Array a = kvstore::Array::Zeros(kvstore::DType::kF16, {1, heads, tokens, 64});
    (void)kv->SetState(kvstore::CacheState({a, a}));
    cache.push_back(kv);
  }
  return cache;
}

void BM_ServerFetchHit(benchmark::State& state) {
  const int64_t tokens = state.range(0), heads = state.range(1);
  kvstore::ServerPromptCache cache({16, int64_t{1} << 40});
  std::vector<int32_t> key(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) key[i] = static_cast<int32_t>(i);
  (void)cache.Insert("m", key, BigCache(tokens, heads));
  std::vector<int32_t> query = key;
  query.push_back(-1);
  int64_t bytes = 0;
  for (auto _ : state) {
    auto hit = cache.Fetch("m", query);
    benchmark::DoNotOptimize(hit);
    bytes = cache.stats().bytes;
  }
  state.counters["cache_bytes"] = static_cast<double>(bytes);
}
// Same 32k tokens, 4x the bytes: the fetch time must not follow the bytes.
BENCHMARK(BM_ServerFetchHit)->Args({32768, 1})->Args({32768, 4});

void BM_PromptTrieSearch100k(benchmark::State& state) {
  kvstore::PromptTrie<int> trie;
  std::mt19937 rng(1);
  std::vector<std::vector<int32_t>> prompts(100000);
  for (auto& p : prompts) {
    p.resize(64);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 50000);
    trie.Add("m", p, 1);
  }
  size_t i = 0;
  for (auto _ : state) {
    auto r = trie.Search("m", prompts[i++ % prompts.size()]);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_PromptTrieSearch100k);

}  // namespace
