// The shared tier: sealed chunk put/get (encode, AES-256-GCM, decrypt into
// the buffer the arrays share, checks, rebuild) against raw put/get of
// values of the same byte sizes on
// the same backend, in the same process; and the latency of fetching a
// long cache from the shared tier and from the disk tier.
//
// The backend is Redis when KVSTORE_BENCH_REDIS_URL is set (see
// bench/shared_tier_bench.sh), else the in-memory backend (codec cost only).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>

#include "bench/shared_tier_bench_util.h"
#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_store.h"
#include "kvstore/shared_prompt_cache.h"

namespace {

using kvstore::bench::BenchBackend;
using kvstore::bench::Cache;
using kvstore::bench::Percentile;

constexpr int64_t kChunk = 256;

std::atomic<int32_t> next_prompt{1};

// Fresh token ids, so that every insert writes new keys.
std::vector<int32_t> FreshTokens(int64_t n) {
  const int32_t base = next_prompt.fetch_add(1) * 1000000;
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = base + static_cast<int32_t>(i);
  return t;
}

std::unique_ptr<kvstore::SharedPromptCache> Tier(kvstore::KvBackend* backend) {
  return kvstore::SharedPromptCache::Open({.backend = backend,
                                           .key_prefix = "kvstore-bench:",
                                           .chunk_tokens = kChunk,
                                           .secret = "bench secret",
                                           .async_insert = false})
      .value();
}

// A tier on the bench backend and a cache of range(0) chunks: 32 layers of
// one 64-dim F16 head, 2 MiB a chunk.
struct ChunkBench {
  explicit ChunkBench(const benchmark::State& state)
      : backend(BenchBackend()),
        tier(Tier(backend)),
        tokens(state.range(0) * kChunk),
        cache(Cache(32, tokens, 1, 64)),
        model(kvstore::ModelFingerprint::Of("bench", cache).value()) {}
  kvstore::KvBackend* backend;
  std::unique_ptr<kvstore::SharedPromptCache> tier;
  int64_t tokens;
  kvstore::PromptCache cache;
  kvstore::ModelFingerprint model;
};

void BM_SharedPutChunks(benchmark::State& state) {
  ChunkBench b(state);
  auto& [backend, tier, tokens, cache, model] = b;
  int64_t bytes = 0;
  for (auto _ : state) {
    const std::vector<int32_t> t = FreshTokens(tokens);
    const int64_t before = tier->stats().bytes_written;
    if (!tier->Insert(model, t, cache).ok()) state.SkipWithError("insert failed");
    bytes += tier->stats().bytes_written - before;
    state.PauseTiming();
    kvstore::bench::DeletePrefix(*backend, "kvstore-bench:v2/");
    state.ResumeTiming();
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_SharedPutChunks)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

// Raw puts of as many values of the same sizes as BM_SharedPutChunks writes.
void BM_RawPutSameSizes(benchmark::State& state) {
  kvstore::KvBackend* backend = BenchBackend();
  const std::vector<std::string> values = kvstore::bench::ChunkSizedValues(state.range(0), 32, kChunk, 1, 64);
  int64_t bytes = 0, round = 0;
  for (auto _ : state) {
    std::vector<std::string> keys;
    std::vector<kvstore::KvPut> puts;
    for (size_t i = 0; i < values.size(); ++i) keys.push_back("kvstore-bench:raw/" + std::to_string(round) + "/" + std::to_string(i));
    for (size_t i = 0; i < values.size(); ++i) puts.push_back({keys[i], values[i]});
    if (!backend->PutIfAbsent(puts).ok()) state.SkipWithError("put failed");
    for (const auto& v : values) bytes += static_cast<int64_t>(v.size());
    ++round;
    state.PauseTiming();
    (void)backend->Delete(keys);
    state.ResumeTiming();
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_RawPutSameSizes)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SharedGetChunks(benchmark::State& state) {
  ChunkBench b(state);
  auto& [backend, tier, tokens, cache, model] = b;
  const std::vector<int32_t> t = FreshTokens(tokens);
  if (!tier->Insert(model, t, cache).ok()) state.SkipWithError("insert failed");
  int64_t bytes = 0;
  for (auto _ : state) {
    const int64_t before = tier->stats().bytes_read;
    auto hit = tier->Fetch(model, t);
    if (!hit.ok() || !hit->has_value() || (*hit)->tokens != tokens) state.SkipWithError("fetch failed");
    bytes += tier->stats().bytes_read - before;
  }
  state.SetBytesProcessed(bytes);
  kvstore::bench::DeletePrefix(*backend, "kvstore-bench:v2/");
}
BENCHMARK(BM_SharedGetChunks)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RawGetSameSizes(benchmark::State& state) {
  kvstore::KvBackend* backend = BenchBackend();
  const std::vector<std::string> values = kvstore::bench::ChunkSizedValues(state.range(0), 32, kChunk, 1, 64);
  std::vector<std::string> keys;
  std::vector<kvstore::KvPut> puts;
  for (size_t i = 0; i < values.size(); ++i) keys.push_back("kvstore-bench:raw/get/" + std::to_string(i));
  for (size_t i = 0; i < values.size(); ++i) puts.push_back({keys[i], values[i]});
  (void)backend->Delete(keys);
  if (!backend->PutIfAbsent(puts).ok()) state.SkipWithError("put failed");
  int64_t bytes = 0;
  for (auto _ : state) {
    auto got = backend->Get(keys);
    if (!got.ok()) state.SkipWithError("get failed");
    for (const auto& v : *got) bytes += v ? static_cast<int64_t>(v->size()) : 0;
  }
  state.SetBytesProcessed(bytes);
  (void)backend->Delete(keys);
}
BENCHMARK(BM_RawGetSameSizes)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

// Latency of one fetch of a cache of range(0) tokens and 32 layers, from
// the shared tier and from the disk tier; p50/p99 over the repetitions.
void LatencyRuns(benchmark::internal::Benchmark* b) {
  b->Arg(32768)
      ->Iterations(1)
      ->Repetitions(30)
      ->ComputeStatistics("p50", [](const std::vector<double>& v) { return Percentile(v, 0.50); })
      ->ComputeStatistics("p99", [](const std::vector<double>& v) { return Percentile(v, 0.99); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

void BM_SharedFetchLatency(benchmark::State& state) {
  kvstore::KvBackend* backend = BenchBackend();
  auto tier = Tier(backend);
  static std::vector<int32_t> t;
  static std::unique_ptr<kvstore::ModelFingerprint> model;
  static kvstore::KvBackend* filled = nullptr;
  if (filled != backend) {
    const kvstore::PromptCache cache = Cache(32, state.range(0), 1, 64);
    model = std::make_unique<kvstore::ModelFingerprint>(kvstore::ModelFingerprint::Of("bench", cache).value());
    t = FreshTokens(state.range(0));
    if (!tier->Insert(*model, t, cache).ok()) state.SkipWithError("insert failed");
    filled = backend;
  }
  for (auto _ : state) {
    auto hit = tier->Fetch(*model, t);
    if (!hit.ok() || !hit->has_value()) state.SkipWithError("fetch failed");
  }
}
BENCHMARK(BM_SharedFetchLatency)->Apply(LatencyRuns);

void BM_DiskFetchLatency(benchmark::State& state) {
  static std::unique_ptr<kvstore::PromptCacheStore> store;
  static std::vector<int32_t> t;
  static std::unique_ptr<kvstore::ModelFingerprint> model;
  if (store == nullptr) {
    const kvstore::PromptCache cache = Cache(32, state.range(0), 1, 64);
    model = std::make_unique<kvstore::ModelFingerprint>(kvstore::ModelFingerprint::Of("bench", cache).value());
    store = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), kvstore::bench::TempDir(), {}).value();
    t = FreshTokens(state.range(0));
    if (!store->Put(*model, t, cache).ok()) state.SkipWithError("put failed");
  }
  for (auto _ : state) {
    auto hit = store->FetchLongestPrefix(*model, t);
    if (!hit.ok() || !hit->has_value()) state.SkipWithError("fetch failed");
  }
}
BENCHMARK(BM_DiskFetchLatency)->Apply(LatencyRuns);

}  // namespace
