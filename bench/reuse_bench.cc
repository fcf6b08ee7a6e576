// Prompt reuse: an in-memory hit costs O(layers), independent of the cache's
// bytes (copy-on-write fetch); a disk-tier miss costs O(prompt); a restart
// serves its first disk hit in a time independent of the stored entries;
// trie lookups over 100k stored prompts.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_store.h"
#include "kvstore/prompt_trie.h"
#include "kvstore/prompt_cache_bytes.h"
#include "kvstore/server_prompt_cache.h"
#include "libkvstore/tiers/store_format.h"  // the store's file names and manifest lines, for the setup
#include "shared_tier_bench_util.h"

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
  const kvstore::PromptCache stored = BigCache(tokens, heads);
  const kvstore::ModelFingerprint model = kvstore::ModelFingerprint::Of("m", stored).value();
  (void)cache.Insert(model, key, stored);
  std::vector<int32_t> query = key;
  query.push_back(-1);
  int64_t bytes = 0;
  for (auto _ : state) {
    auto hit = cache.Fetch(model, query);
    benchmark::DoNotOptimize(hit);
    bytes = cache.stats().bytes;
  }
  state.counters["cache_bytes"] = static_cast<double>(bytes);
}
// Same 32k tokens, 4x the bytes: the fetch time must not follow the bytes.
BENCHMARK(BM_ServerFetchHit)->Args({32768, 1})->Args({32768, 4});

// The next turn of a conversation (its 32k tokens in memory and on disk,
// then 64 new ones) under the memory policy range(0) (0 server, 1 mlx-lm):
// a memory hit, with the disk's index asked whether it holds more (it does
// not: its entry is the one memory served, and is not read).
void BM_TieredFetchMemoryHit(benchmark::State& state) {
  const int64_t tokens = 32768;
  std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  auto store = kvstore::PromptCacheStore::Open(env.get(), "/store", {});
  if (!store.ok() || !(*store)->WaitUntilIndexed().ok()) {
    state.SkipWithError("open failed");
    return;
  }
  const auto policy = state.range(0) ? kvstore::MemoryPolicy::kMlxLm : kvstore::MemoryPolicy::kServer;
  kvstore::ServerPromptCache cache({.disk = store->get(), .memory_policy = policy, .async_writes = false});
  std::vector<int32_t> key(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) key[i] = static_cast<int32_t>(i);
  const kvstore::PromptCache stored = BigCache(tokens, 1);
  const kvstore::ModelFingerprint model = kvstore::ModelFingerprint::Of("m", stored).value();
  if (!cache.Insert(model, key, stored).ok()) {
    state.SkipWithError("insert failed");
    return;
  }
  std::vector<int32_t> query = key;
  for (int i = 0; i < 64; ++i) query.push_back(-1 - i);
  for (auto _ : state) {
    auto hit = cache.Fetch(model, query);
    if (!hit.ok() || !hit->has_value() || (*hit)->tier != kvstore::PromptCacheTier::kMemory) {
      state.SkipWithError("not a memory hit");
      return;
    }
    benchmark::DoNotOptimize(hit);
  }
}
BENCHMARK(BM_TieredFetchMemoryHit)->Arg(0)->Arg(1);

// A disk hit on the second of two 2048-token conversations that share their
// first 1536 tokens (32 layers of 8 KV heads of 64 dims, F16: 64 KiB of KV
// per token, 128 MiB per entry): with share_prefixes = range(0), its entry
// is a delta (512 rows of its own, joined with its base's 1536 at the load)
// instead of a whole file. What a
// stored prefix shared costs the serving path. A directory on disk (in the
// page cache once written): the load maps the files.
void BM_StoreFetchSharedPrefix(benchmark::State& state) {
  constexpr int64_t kTokens = 2048, kShared = 1536;
  const std::string dir = kvstore::bench::TempDir() + "/shared-prefix-" + std::to_string(state.range(0));
  std::filesystem::remove_all(dir);
  kvstore::PromptCacheStoreOptions options;
  options.share_prefixes = state.range(0) != 0;
  auto opened = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), dir, options);
  if (!opened.ok() || !(*opened)->WaitUntilIndexed().ok()) {
    state.SkipWithError("open failed");
    return;
  }
  std::unique_ptr<kvstore::PromptCacheStore> store = std::move(opened).value();
  std::vector<int32_t> first(kTokens), second(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) {
    first[i] = static_cast<int32_t>(i);
    second[i] = static_cast<int32_t>(i < kShared ? i : 100000 + i);
  }
  const kvstore::PromptCache cache = BigCache(kTokens, 8);
  if (!store->Put("m", first, cache).ok() || !store->Put("m", second, cache).ok()) {
    state.SkipWithError("put failed");
    return;
  }
  std::vector<int32_t> query = second;
  query.push_back(-1);
  for (auto _ : state) {
    auto hit = store->FetchLongestPrefix("m", query);
    if (!hit.ok() || !hit->has_value() || (*hit)->length != kTokens) {
      state.SkipWithError("not a hit of the whole entry");
      return;
    }
    benchmark::DoNotOptimize(hit);
  }
  state.counters["store_bytes"] = static_cast<double>(store->bytes());
}
BENCHMARK(BM_StoreFetchSharedPrefix)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// A miss of a prompt of range(0) tokens on a store of 300 entries whose
// keys have 300 lengths between 64 and ~4k tokens (the prompt shares its
// first 31 tokens with the 64-token key: one short of the 32-token granule
// from which a longer entry is trimmed and served): what the disk tier
// adds to ServerPromptCache's miss path. In-memory Env: a miss reads no
// file.
void BM_StoreMiss(benchmark::State& state) {
  const size_t tokens = static_cast<size_t>(state.range(0));
  std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  auto opened = kvstore::PromptCacheStore::Open(env.get(), "/store", {});
  if (!opened.ok()) {
    state.SkipWithError(opened.status().ToString().c_str());
    return;
  }
  std::unique_ptr<kvstore::PromptCacheStore> store = std::move(opened).value();
  std::mt19937 rng(1);
  std::vector<int32_t> query;
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> key(static_cast<size_t>(64 + i * 13));
    for (auto& t : key) t = static_cast<int32_t>(rng() % 50000);
    if (i == 0) query.assign(key.begin(), key.begin() + 31);
    // One head of one dimension: an entry holds as many tokens as its key, in few bytes.
    auto kv = std::make_shared<kvstore::KVCache>();
    kvstore::Array a = kvstore::Array::Zeros(kvstore::DType::kF16, {1, 1, static_cast<int64_t>(key.size()), 1});
    (void)kv->SetState(kvstore::CacheState({a, a}));
    if (!store->Put("m", key, {kv}).ok()) {
      state.SkipWithError("put failed");
      return;
    }
  }
  while (query.size() < tokens) query.push_back(static_cast<int32_t>(rng() % 50000));
  if (auto hit = store->FetchLongestPrefix("m", query); !hit.ok() || hit->has_value()) {
    state.SkipWithError("not a miss");
    return;
  }
  for (auto _ : state) {
    auto hit = store->FetchLongestPrefix("m", query);
    benchmark::DoNotOptimize(hit);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * tokens));
}
// Goal: /32768 within 40x of /1024 (linear in the prompt).
BENCHMARK(BM_StoreMiss)->Arg(1024)->Arg(32768);

// A store directory on disk of `entries` entries: 64-token keys, one
// KVCache layer [1, 2, 64, 8] F16 each (a 2 KiB cache, a 3 KiB file), and
// its MANIFEST, as PromptCacheStore::Put writes them (store_format.h) but
// without an fsync and a directory listing per file; made once per size.
// `key` receives the key of the entry in the middle.
std::string StoreOfEntries(int64_t entries, std::vector<int32_t>& key) {
  static std::map<int64_t, std::pair<std::string, std::vector<int32_t>>> made;
  if (auto it = made.find(entries); it != made.end()) {
    key = it->second.second;
    return it->second.first;
  }
  const std::string dir = kvstore::bench::TempDir() + "/store-" + std::to_string(entries);
  std::filesystem::create_directories(dir);
  auto kv = std::make_shared<kvstore::KVCache>();
  kvstore::Array a = kvstore::Array::Zeros(kvstore::DType::kF16, {1, 2, 64, 8});
  (void)kv->SetState(kvstore::CacheState({a, a}));
  const kvstore::ModelFingerprint fp = kvstore::ModelFingerprint::Of("m", {kv}).value();
  kvstore::SavePromptCacheOptions options;
  options.layout = kvstore::PromptCacheLayout::kMlxLm;
  std::mt19937 rng(static_cast<uint32_t>(entries));
  std::vector<int32_t> k(64);
  std::string manifest;
  for (int64_t i = 0; i < entries; ++i) {
    for (auto& t : k) t = static_cast<int32_t>(rng() % 50000);
    if (i == entries / 2) key = k;
    kvstore::Metadata metadata = kvstore::StoreKeyMetadata("m", k);
    metadata.emplace_back(std::string(kvstore::kStoreFingerprintKey), fp.json());
    auto bytes = kvstore::SavePromptCacheToString({kv}, metadata, options);
    if (!bytes.ok()) return "";
    const std::string name = kvstore::StoreFileName("m", k);
    std::ofstream(dir + "/" + name, std::ios::binary) << *bytes;
    manifest += kvstore::ManifestAddLine(name, static_cast<int64_t>(bytes->size()), "m", k, fp.digest().ToHex());
  }
  std::ofstream(dir + "/MANIFEST", std::ios::binary) << manifest;
  made[entries] = {dir, key};
  return dir;
}

// A restart: Open of a store of range(0) entries on disk, then the fetch
// of a prompt extending one entry's key, which hits (load + SHA-256
// verification included). Open reads no entry and the fetch finds the entry
// by its file name while the store indexes the directory on its own thread,
// so the time does not follow the entries. Goal: /100000 within 3x of /1000.
// Closing the store (stopping its indexer) is outside the timed region.
void BM_StoreOpenToFirstHit(benchmark::State& state) {
  std::vector<int32_t> key;
  const std::string dir = StoreOfEntries(state.range(0), key);
  if (dir.empty()) {
    state.SkipWithError("cannot write the store");
    return;
  }
  std::vector<int32_t> query = key;
  for (int32_t t = 0; t < 8; ++t) query.push_back(60000 + t);
  for (auto _ : state) {
    auto store = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), dir, {});
    if (!store.ok()) {
      state.SkipWithError(store.status().ToString().c_str());
      return;
    }
    auto hit = (*store)->FetchLongestPrefix("m", query);
    if (!hit.ok() || !hit->has_value() || (*hit)->length != 64) {
      state.SkipWithError("not a hit");
      return;
    }
    state.PauseTiming();
    store->reset();
    state.ResumeTiming();
  }
}
// A fixed count: closing a store stops its indexer, which may be listing the
// 100k-entry directory at that moment (untimed, but it adds up).
BENCHMARK(BM_StoreOpenToFirstHit)->Arg(1000)->Arg(100000)->Iterations(30)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same stores indexed completely before Open returns (Open with a
// report, as kvtool and the simulator's report need): O(entries),
// from the manifest without reading an entry.
void BM_StoreOpenIndexed(benchmark::State& state) {
  std::vector<int32_t> key;
  const std::string dir = StoreOfEntries(state.range(0), key);
  for (auto _ : state) {
    kvstore::StoreOpenReport report;
    auto store = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), dir, {}, &report);
    if (!store.ok() || report.from_manifest != state.range(0)) {
      state.SkipWithError("not indexed from the manifest");
      return;
    }
    state.PauseTiming();
    store->reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_StoreOpenIndexed)->Arg(1000)->Arg(100000)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

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
