// MLX affine quantization throughput (input bytes/s), next to a memcpy of
// the same bytes. BM_Quantize_F16_G64_B4 is the KV-cache case (to_quantized
// with mlx-lm's defaults): [1, 8, 4096, 128] F16.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kvstore/float16.h"
#include "kvstore/quantize.h"

namespace {

kvstore::Array RandomF16(const kvstore::Shape& shape) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(static_cast<size_t>(kvstore::ShapeNumel(shape)));
  for (auto& x : v) x = kvstore::FloatToHalf(dist(rng));
  return kvstore::Array::FromValues<uint16_t>(kvstore::DType::kF16, shape, v);
}

void QuantizeBench(benchmark::State& state, int bits, int group_size, int threads_hint) {
  const kvstore::Array w = RandomF16({1, 8, 4096, 128});
  kvstore::QuantizeOptions options{group_size, bits, kvstore::QuantizeOptions::Rounding::kCpu};
  (void)threads_hint;
  for (auto _ : state) {
    auto q = kvstore::Quantize(w, options);
    benchmark::DoNotOptimize(q);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.nbytes()));
}

void BM_Quantize_F16_G64_B4(benchmark::State& state) { QuantizeBench(state, 4, 64, 0); }

// 2 MiB input: below the parallel threshold, so this is one core.
void BM_Quantize_F16_G64_B4_OneCore(benchmark::State& state) {
  const kvstore::Array w = RandomF16({1, 8, 1024, 128});
  for (auto _ : state) {
    auto q = kvstore::Quantize(w, {64, 4, kvstore::QuantizeOptions::Rounding::kCpu});
    benchmark::DoNotOptimize(q);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.nbytes()));
}
BENCHMARK(BM_Quantize_F16_G64_B4_OneCore)->UseRealTime();
void BM_Quantize_F16_G32_B8(benchmark::State& state) { QuantizeBench(state, 8, 32, 0); }
void BM_Quantize_F16_G64_B3(benchmark::State& state) { QuantizeBench(state, 3, 64, 0); }
BENCHMARK(BM_Quantize_F16_G64_B4)->UseRealTime();
BENCHMARK(BM_Quantize_F16_G32_B8)->UseRealTime();
BENCHMARK(BM_Quantize_F16_G64_B3)->UseRealTime();

void BM_Dequantize_F16_G64_B4(benchmark::State& state) {
  const kvstore::Array w = RandomF16({1, 8, 4096, 128});
  auto q = kvstore::Quantize(w, {64, 4, kvstore::QuantizeOptions::Rounding::kCpu}).value();
  for (auto _ : state) {
    auto d = kvstore::Dequantize(q, 64, 4);
    benchmark::DoNotOptimize(d);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.nbytes()));
}
BENCHMARK(BM_Dequantize_F16_G64_B4)->UseRealTime();

// Reference: copying the same input bytes.
void BM_MemcpyQuantizeInput(benchmark::State& state) {
  const size_t bytes = size_t{8} * 4096 * 128 * 2;
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_MemcpyQuantizeInput)->UseRealTime();

}  // namespace
