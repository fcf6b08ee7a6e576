// Safetensors write and read throughput (bytes/s) next to a memcpy of the
// same bytes: 64 F16 tensors of [1, 8, 256, 128] (32 MiB).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "kvstore/env.h"
#include "kvstore/safetensors.h"

namespace {

std::vector<kvstore::NamedArray> Tensors() {
  std::vector<kvstore::NamedArray> out;
  for (int i = 0; i < 64; ++i) {
    out.push_back({std::to_string(i / 2) + "." + std::to_string(i % 2),
                   kvstore::Array::Zeros(kvstore::DType::kF16, {1, 8, 256, 128})});
  }
  return out;
}

int64_t TotalBytes(const std::vector<kvstore::NamedArray>& t) {
  int64_t n = 0;
  for (const auto& x : t) n += static_cast<int64_t>(x.array.nbytes());
  return n;
}

// Writes into an in-memory Env (so the figure is the writer's own cost).
void BM_SafetensorsWrite(benchmark::State& state) {
  const auto tensors = Tensors();
  auto env = kvstore::NewMemEnv();
  for (auto _ : state) {
    auto file = env->NewWritableFile("/x").value();
    if (!kvstore::WriteSafetensors(*file, tensors, {}).ok() || !file->Close().ok()) state.SkipWithError("write");
  }
  state.SetBytesProcessed(state.iterations() * TotalBytes(tensors));
}
BENCHMARK(BM_SafetensorsWrite)->UseRealTime();

// Parses the header and copies every tensor out of the mapping.
void BM_SafetensorsRead(benchmark::State& state) {
  const auto tensors = Tensors();
  auto env = kvstore::NewMemEnv();
  {
    auto file = env->NewWritableFile("/x").value();
    (void)kvstore::WriteSafetensors(*file, tensors, {});
    (void)file->Close();
  }
  auto readable = env->OpenReadable("/x").value();
  std::vector<std::byte> sink(static_cast<size_t>(TotalBytes(tensors)));
  for (auto _ : state) {
    auto st = kvstore::SafetensorsFile::FromReadable(readable).value();
    size_t pos = 0;
    for (const auto& t : st->header().tensors) {
      auto bytes = st->TensorBytes(t);
      std::memcpy(sink.data() + pos, bytes.data(), bytes.size());
      pos += bytes.size();
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * TotalBytes(tensors));
}
BENCHMARK(BM_SafetensorsRead)->UseRealTime();

void BM_MemcpySafetensorsPayload(benchmark::State& state) {
  const size_t bytes = size_t{64} * 8 * 256 * 128 * 2;
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_MemcpySafetensorsPayload)->UseRealTime();

}  // namespace
