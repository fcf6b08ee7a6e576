// Helpers of the shared-tier benchmarks: the backend under test, caches
// and values of chunk sizes, cleanup, percentiles.
#ifndef KVSTORE_BENCH_SHARED_TIER_BENCH_UTIL_H_
#define KVSTORE_BENCH_SHARED_TIER_BENCH_UTIL_H_

#include <string>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/kv_backend.h"

namespace kvstore::bench {

// Redis at $KVSTORE_BENCH_REDIS_URL when set, else an in-memory backend;
// opened once, never destroyed.
KvBackend* BenchBackend();

// `layers` KVCaches of [1, heads, tokens, dim] F16 with random bytes.
PromptCache Cache(int64_t layers, int64_t tokens, int64_t heads, int64_t dim);

// Random values of the sizes the chunks of such a cache take (`chunks`
// chunks of `chunk_tokens` tokens), as the shared tier writes them.
std::vector<std::string> ChunkSizedValues(int64_t chunks, int64_t layers, int64_t chunk_tokens, int64_t heads,
                                          int64_t dim);

// Deletes every key under `prefix`.
void DeletePrefix(KvBackend& backend, const std::string& prefix);

// A fresh directory, removed with its content when the process exits.
std::string TempDir();

// The p-quantile (nearest rank) of `v`.
double Percentile(std::vector<double> v, double p);

}  // namespace kvstore::bench

#endif  // KVSTORE_BENCH_SHARED_TIER_BENCH_UTIL_H_
