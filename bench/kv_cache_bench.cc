// Decode-step appends: the cost of one KVCache append must not grow with the
// history (O(new tokens)). BM_KVCacheAppend/<context> appends one token
// (B=1, 8 KV heads, head_dim 128, F16) to a cache already holding <context>
// tokens; BM_MemcpyAppendReference copies the same bytes with memcpy.
#include <benchmark/benchmark.h>

#include <cstring>
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
  int64_t appended = 0;
  for (auto _ : state) {
    // Stay inside one 256-step block so growth (amortised) is measured
    // separately by the trim below, outside the timed region.
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
