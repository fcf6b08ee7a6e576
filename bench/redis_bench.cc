// The Redis backend's chunk put/get against raw hiredis SET/GET of the same
// bytes on the same server, in the same process. The server comes from
// KVSTORE_BENCH_REDIS_URL (bench/redis_bench.sh starts one); without it these
// benchmarks report an error and the rest of kvstore_bench runs as usual.
//
// Puts write a fresh key each iteration (SET NX on both sides) and delete it
// (UNLINK, as the backend does) outside the timed region, so that both sides
// really write.
#include <benchmark/benchmark.h>
#include <hiredis.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "kvstore/redis_backend.h"

namespace {

std::string BenchUrl() {
  const char* url = std::getenv("KVSTORE_BENCH_REDIS_URL");
  return url != nullptr ? url : "";
}

std::string Value(size_t size) {
  std::string v(size, '\0');
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<char>((i * 2654435761u) >> 13);
  return v;
}

std::unique_ptr<kvstore::KvBackend> OpenBackend(benchmark::State& state) {
  if (BenchUrl().empty()) {
    state.SkipWithError("KVSTORE_BENCH_REDIS_URL is not set (see bench/redis_bench.sh)");
    return nullptr;
  }
  auto backend = kvstore::OpenRedisBackend({.url = BenchUrl(), .command_timeout = std::chrono::seconds(5)});
  if (!backend.ok()) {
    state.SkipWithError(backend.status().ToString().c_str());
    return nullptr;
  }
  return std::move(backend).value();
}

// The reference client: plain hiredis, its usual blocking calls.
struct RawRedis {
  redisContext* c = nullptr;
  ~RawRedis() {
    if (c != nullptr) redisFree(c);
  }
  bool Open(benchmark::State& state) {
    auto url = kvstore::ParseRedisUrl(BenchUrl());
    if (!url.ok()) {
      state.SkipWithError("KVSTORE_BENCH_REDIS_URL is not set or not valid (see bench/redis_bench.sh)");
      return false;
    }
    c = redisConnect(url->host.c_str(), url->port);
    if (c == nullptr || c->err != 0) {
      state.SkipWithError("raw hiredis: connect failed");
      return false;
    }
    if (!url->password.empty()) {
      std::string user = url->user.empty() ? "default" : url->user;
      Check(redisCommand(c, "AUTH %b %b", user.data(), user.size(), url->password.data(),
                         url->password.size()));
    }
    return true;
  }
  static void Check(void* reply) {
    if (reply == nullptr) std::abort();
    freeReplyObject(reply);
  }
};

void BM_RedisPutChunk(benchmark::State& state) {
  auto backend = OpenBackend(state);
  if (backend == nullptr) return;
  const std::string key = "bench:put", value = Value(static_cast<size_t>(state.range(0)));
  std::vector<std::string> keys = {key};
  (void)backend->Delete(keys);
  kvstore::KvPut item{key, value};
  for (auto _ : state) {
    auto wrote = backend->PutIfAbsent({&item, 1});
    if (!wrote.ok() || !(*wrote)[0]) state.SkipWithError("put failed");
    state.PauseTiming();
    (void)backend->Delete(keys);
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_RedisGetChunk(benchmark::State& state) {
  auto backend = OpenBackend(state);
  if (backend == nullptr) return;
  const std::string key = "bench:get", value = Value(static_cast<size_t>(state.range(0)));
  std::vector<std::string> keys = {key};
  (void)backend->Delete(keys);
  kvstore::KvPut item{key, value};
  (void)backend->PutIfAbsent({&item, 1});
  for (auto _ : state) {
    auto got = backend->Get(keys);
    if (!got.ok() || !(*got)[0] || (*got)[0]->size() != value.size()) state.SkipWithError("get failed");
    benchmark::DoNotOptimize(got);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_RawHiredisSet(benchmark::State& state) {
  RawRedis raw;
  if (!raw.Open(state)) return;
  const std::string value = Value(static_cast<size_t>(state.range(0)));
  RawRedis::Check(redisCommand(raw.c, "UNLINK bench:rawset"));
  for (auto _ : state) {
    auto* r = static_cast<redisReply*>(
        redisCommand(raw.c, "SET bench:rawset %b NX", value.data(), value.size()));
    if (r == nullptr || r->type != REDIS_REPLY_STATUS) state.SkipWithError("raw SET failed");
    RawRedis::Check(r);
    state.PauseTiming();
    RawRedis::Check(redisCommand(raw.c, "UNLINK bench:rawset"));
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_RawHiredisGet(benchmark::State& state) {
  RawRedis raw;
  if (!raw.Open(state)) return;
  const std::string value = Value(static_cast<size_t>(state.range(0)));
  RawRedis::Check(redisCommand(raw.c, "SET bench:rawget %b", value.data(), value.size()));
  for (auto _ : state) {
    auto* r = static_cast<redisReply*>(redisCommand(raw.c, "GET bench:rawget"));
    if (r == nullptr || r->type != REDIS_REPLY_STRING || r->len != value.size()) {
      state.SkipWithError("raw GET failed");
    }
    RawRedis::Check(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

// 1 MiB: a 256-token chunk of a small model; 8 MiB and 32 MiB: larger models.
#define KVSTORE_REDIS_SIZES ->Arg(1 << 20)->Arg(8 << 20)->Arg(32 << 20)->UseRealTime()
BENCHMARK(BM_RawHiredisSet) KVSTORE_REDIS_SIZES;
BENCHMARK(BM_RedisPutChunk) KVSTORE_REDIS_SIZES;
BENCHMARK(BM_RawHiredisGet) KVSTORE_REDIS_SIZES;
BENCHMARK(BM_RedisGetChunk) KVSTORE_REDIS_SIZES;

}  // namespace
