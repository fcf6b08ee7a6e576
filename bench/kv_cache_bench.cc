// Decode-step appends: the cost of one KVCache append must not grow with the
// history (O(new tokens)). BM_KVCacheAppend/<context> appends one token
// (B=1, 8 KV heads, head_dim 128, F16) to a cache already holding <context>
// tokens; BM_MemcpyAppendReference copies the same bytes with memcpy.
// BM_KVCacheGrowth/<context> is the one append in 256 that crosses a step
// and grows the buffers (an O(context) copy, as mlx-lm's concatenate);
// BM_GrowthMemcpyReference/<context> allocates and copies the same bytes.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kvstore/kv_cache.h"

namespace {

constexpr int64_t kHeads = 8;
constexpr int64_t kHeadDim = 128;

kvstore::Array Tokens(int64_t n) {
  return kvstore::Array::Zeros(kvstore::DType::kF16, {1, kHeads, n, kHeadDim});
}

void BM_KVCacheAppend(benchmark::State& state) {
  const int64_t context = state.range(0);
  const kvstore::Array prefill = Tokens(context);
  const kvstore::Array step = Tokens(1);
  kvstore::KVCache cache;
  if (!cache.UpdateAndFetch(prefill, prefill).ok()) state.SkipWithError("prefill failed");
  // The prefill may end on a step (every context here is a multiple of 256):
  // grow the buffers to hold 256 more tokens now, outside the timed region,
  // then trim back. The timed appends then stay below the buffers' end,
  // and the trim below keeps them there.
  const kvstore::Array room = Tokens(kvstore::KVCache::kStep);
  if (!cache.UpdateAndFetch(room, room).ok() || !cache.Trim(kvstore::KVCache::kStep).ok()) {
    state.SkipWithError("growth failed");
  }
  int64_t appended = 0;
  for (auto _ : state) {
    auto kv = cache.UpdateAndFetch(step, step);
    benchmark::DoNotOptimize(kv);
    if (++appended == 200) {
      state.PauseTiming();
      (void)cache.Trim(appended);
      appended = 0;
      state.ResumeTiming();
    }
  }
  state.SetBytesProcessed(state.iterations() * 2 * step.nbytes());
  state.counters["context"] = static_cast<double>(context);
}
BENCHMARK(BM_KVCacheAppend)->Arg(1024)->Arg(8192)->Arg(32768);

// A buffer of `rows` rows like the cache's, every page written.
kvstore::Array Filled(int64_t rows) {
  const std::vector<std::byte> bytes(static_cast<size_t>(kHeads * rows * kHeadDim) * 2, std::byte{0x3c});
  return kvstore::Array::FromBytes(kvstore::DType::kF16, {1, kHeads, rows, kHeadDim}, bytes);
}

// The append that crosses a step at <context> tokens: new key and value
// buffers of context + 256 rows, the context copied into them, the token
// written. Each iteration restores a full cache first (it shares the
// restored arrays: O(1)) and frees the grown one after, both untimed.
void BM_KVCacheGrowth(benchmark::State& state) {
  const int64_t context = state.range(0);
  const kvstore::Array full = Filled(context);
  const kvstore::Array step = Tokens(1);
  for (auto _ : state) {
    state.PauseTiming();
    auto cache = std::make_unique<kvstore::KVCache>();
    if (!cache->SetState(kvstore::CacheState({full, full})).ok()) state.SkipWithError("restore failed");
    state.ResumeTiming();
    auto kv = cache->UpdateAndFetch(step, step);
    benchmark::DoNotOptimize(kv);
    state.PauseTiming();
    kv = kvstore::Status::Internal("released");
    cache.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(full.nbytes()));
}
BENCHMARK(BM_KVCacheGrowth)->Arg(32768)->Arg(131072)->Unit(benchmark::kMillisecond)->UseRealTime();

// What growth cannot avoid: two fresh buffers of context + 256 rows, the
// context copied into each (memcpy), the rest zeroed, as the cache does.
void BM_GrowthMemcpyReference(benchmark::State& state) {
  const int64_t context = state.range(0);
  const size_t row = static_cast<size_t>(kHeads * kHeadDim) * 2;
  const size_t used = row * static_cast<size_t>(context), total = used + row * 256;
  std::vector<char> src(used, 0x3c);
  for (auto _ : state) {
    for (int kv = 0; kv < 2; ++kv) {
      std::unique_ptr<char[]> dst(new char[total]);
      std::memcpy(dst.get(), src.data(), used);
      std::memset(dst.get() + used, 0, total - used);
      benchmark::DoNotOptimize(dst.get());
      state.PauseTiming();
      dst.reset();
      state.ResumeTiming();
    }
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(used));
}
BENCHMARK(BM_GrowthMemcpyReference)->Arg(32768)->Arg(131072)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same bytes per append copied with memcpy: the floor an append can reach.
void BM_MemcpyAppendReference(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(kHeads * kHeadDim) * 2;
  std::vector<char> src(bytes, 1), dst(bytes * 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    std::memcpy(dst.data() + bytes, src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_MemcpyAppendReference);

}  // namespace
