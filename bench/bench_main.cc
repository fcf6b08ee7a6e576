// kvstore_bench: Google Benchmark suite. Each benchmark reports bytes/s and
// sits next to a reference (memcpy) measured in the same process.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
