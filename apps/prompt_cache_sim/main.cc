// prompt_cache_sim: simulates an inference server's prompt-cache traffic and
// checks every reused cache bit-exactly.
//
// R requests from T threads; prompts are one of a few shared system prompts
// plus a conversation drawn from a small pool plus a random tail. "Prefill"
// computes each token's K/V as a deterministic function of (layer, position,
// token id, hash of the whole prefix), so a reused cache can be compared
// with a fresh computation. With --store DIR the disk tier persists entries
// across runs; a run on a directory left by a killed run recovers it.
// Ends with "hit_rate: X%", "mismatches: N" and "corrupt_served: N"; exits
// non-zero on any mismatch. With a store it also reports what the store
// dropped at open and since (corrupt files, files holding another key).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "kvstore/float16.h"
#include "kvstore/kv_cache.h"
#include "kvstore/server_prompt_cache.h"

namespace {

constexpr int64_t kLayers = 4, kHeads = 2, kDim = 16;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// K (or V) of one token: [1, H, 1, D] F16.
kvstore::Array TokenKV(int64_t layer, int64_t pos, int32_t token, uint64_t prefix_hash, bool value) {
  std::vector<uint16_t> v(kHeads * kDim);
  for (int64_t i = 0; i < kHeads * kDim; ++i) {
    const uint64_t h = Mix(prefix_hash ^ Mix(layer * 1315423911ull + pos * 2654435761ull + i * 97 + (value ? 7 : 0)) ^
                           static_cast<uint32_t>(token));
    v[i] = kvstore::FloatToHalf(static_cast<float>(static_cast<int64_t>(h % 2001) - 1000) / 1000.0f);
  }
  return kvstore::Array::FromValues<uint16_t>(kvstore::DType::kF16, {1, kHeads, 1, kDim}, v);
}

std::vector<uint64_t> PrefixHashes(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> h(tokens.size() + 1, 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < tokens.size(); ++i) h[i + 1] = Mix(h[i] ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

// Keys/values rows [from, to) of a layer, computed fresh.
kvstore::Array Fresh(const std::vector<int32_t>& tokens, const std::vector<uint64_t>& ph, int64_t layer,
                     int64_t from, int64_t to, bool value) {
  std::vector<kvstore::Array> rows;
  for (int64_t p = from; p < to; ++p) rows.push_back(TokenKV(layer, p, tokens[p], ph[p + 1], value));
  return kvstore::Array::Concatenate(rows, 2);
}

struct Stats {
  std::atomic<int64_t> requests{0}, hits{0}, disk_hits{0}, reused{0}, tokens{0}, mismatches{0}, corrupt_served{0},
      errors{0};
  std::mutex mu;
  std::vector<double> latency_us;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prompt_cache_sim: concurrent prompt-cache traffic with bit-exact checks"};
  int threads = 2, requests = 200;
  uint64_t seed = 1;
  std::string store_dir;
  int64_t mem_bytes = int64_t{64} << 20, disk_bytes = int64_t{256} << 20, max_entries = 256;
  app.add_option("--threads", threads, "request threads");
  app.add_option("--requests", requests, "total requests");
  app.add_option("--seed", seed, "random seed");
  app.add_option("--store", store_dir, "disk tier directory (optional)");
  app.add_option("--memory-bytes", mem_bytes, "in-memory byte budget");
  app.add_option("--disk-bytes", disk_bytes, "disk byte budget");
  app.add_option("--max-entries", max_entries, "in-memory entry budget");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<kvstore::PromptCacheStore> store;
  if (!store_dir.empty()) {
    kvstore::StoreOpenReport report;
    auto opened = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), store_dir, {disk_bytes}, &report);
    if (!opened.ok()) {
      std::fprintf(stderr, "prompt_cache_sim: %s\n", opened.status().ToString().c_str());
      return 2;
    }
    store = std::move(opened).value();
    std::printf("store: %lld entries recovered (%lld from the manifest, %lld manifest lines ignored), %zu dropped\n",
                static_cast<long long>(report.entries), static_cast<long long>(report.from_manifest),
                static_cast<long long>(report.manifest_ignored), report.dropped.size());
    for (const auto& d : report.dropped) std::printf("  dropped %s\n", d.c_str());
  }
  kvstore::ServerPromptCache cache({max_entries, mem_bytes}, store.get());
  Stats stats;
  const std::string model = "sim-model";

  std::mt19937_64 pool_rng(seed);
  std::vector<std::vector<int32_t>> systems(3), conversations(12);
  for (auto& s : systems) for (int i = 0; i < 48; ++i) s.push_back(static_cast<int32_t>(pool_rng() % 32000));
  for (auto& c : conversations) for (int i = 0; i < 24; ++i) c.push_back(static_cast<int32_t>(pool_rng() % 32000));

  std::atomic<int> next{0};
  auto worker = [&](int id) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(id));
    while (next.fetch_add(1) < requests) {
      std::vector<int32_t> tokens = systems[rng() % systems.size()];
      std::vector<int64_t> boundaries = {static_cast<int64_t>(tokens.size())};
      if (rng() % 4 != 0) {
        const auto& c = conversations[rng() % conversations.size()];
        tokens.insert(tokens.end(), c.begin(), c.end());
        boundaries.push_back(static_cast<int64_t>(tokens.size()));
      }
      const int tail = static_cast<int>(rng() % 16);
      for (int i = 0; i < tail; ++i) tokens.push_back(static_cast<int32_t>(rng() % 32000));
      const auto ph = PrefixHashes(tokens);
      const auto t0 = std::chrono::steady_clock::now();
      auto hit = cache.Fetch(model, tokens);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      stats.requests++;
      stats.tokens += static_cast<int64_t>(tokens.size());
      {
        std::lock_guard<std::mutex> l(stats.mu);
        stats.latency_us.push_back(us);
      }
      if (!hit.ok()) {
        stats.errors++;
        continue;
      }
      kvstore::PromptCache layers;
      int64_t reused = 0;
      if (*hit) {
        stats.hits++;
        if ((*hit)->from_disk) stats.disk_hits++;
        reused = (*hit)->reused;
        layers = std::move((*hit)->cache);
        // Every reused row must equal a fresh computation.
        bool ok = static_cast<int64_t>(layers.size()) == kLayers;
        for (int64_t l = 0; ok && l < kLayers; ++l) {
          if (layers[l]->offset().value_or(-1) != reused) { ok = false; break; }
          auto st = layers[l]->State();
          if (!st.ok()) { ok = false; break; }
          ok = (*st)[0].array().Slice(2, 0, reused).ContentEquals(Fresh(tokens, ph, l, 0, reused, false)) &&
               (*st)[1].array().Slice(2, 0, reused).ContentEquals(Fresh(tokens, ph, l, 0, reused, true));
        }
        if (!ok) {
          stats.mismatches++;
          if ((*hit)->from_disk) stats.corrupt_served++;
          continue;
        }
        stats.reused += reused;
      } else {
        for (int64_t l = 0; l < kLayers; ++l) layers.push_back(std::make_shared<kvstore::KVCache>());
      }
      // Prefill the rest and store the whole prompt.
      const int64_t n = static_cast<int64_t>(tokens.size());
      for (int64_t l = 0; l < kLayers; ++l) {
        if (reused < n) {
          auto r = layers[l]->UpdateAndFetch(Fresh(tokens, ph, l, reused, n, false), Fresh(tokens, ph, l, reused, n, true));
          if (!r.ok()) stats.errors++;
        }
      }
      if (!cache.Insert(model, tokens, layers).ok()) stats.errors++;
      // Like a server checkpointing shared prefixes: also store the system
      // prompt and the conversation boundary (trimmed copy-on-write copies).
      for (int64_t b : boundaries) {
        if (b >= n || b <= reused) continue;
        kvstore::PromptCache prefix;
        for (const auto& layer : layers) {
          prefix.push_back(std::shared_ptr<kvstore::Cache>(layer->Copy()));
          if (!prefix.back()->Trim(n - b).ok()) stats.errors++;
        }
        if (!cache.Insert(model, std::span<const int32_t>(tokens).first(static_cast<size_t>(b)), prefix).ok()) {
          stats.errors++;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (auto& t : pool) t.join();

  std::sort(stats.latency_us.begin(), stats.latency_us.end());
  auto pct = [&](double p) {
    return stats.latency_us.empty() ? 0.0 : stats.latency_us[static_cast<size_t>(p * (stats.latency_us.size() - 1))];
  };
  const auto s = cache.stats();
  const double hit_rate = stats.requests ? 100.0 * stats.hits / stats.requests : 0.0;
  std::printf("requests: %lld (threads %d)\n", static_cast<long long>(stats.requests.load()), threads);
  std::printf("hits: %lld (disk %lld)\n", static_cast<long long>(stats.hits.load()), static_cast<long long>(stats.disk_hits.load()));
  std::printf("tokens_reused: %lld of %lld\n", static_cast<long long>(stats.reused.load()), static_cast<long long>(stats.tokens.load()));
  std::printf("memory: %lld entries, %lld bytes\n", static_cast<long long>(s.entries), static_cast<long long>(s.bytes));
  if (store) {
    std::printf("disk: %lld entries, %lld bytes, %lld corrupt dropped, %lld mismatched dropped\n",
                static_cast<long long>(store->entries()), static_cast<long long>(store->bytes()),
                static_cast<long long>(store->corrupt_dropped()), static_cast<long long>(store->mismatched_dropped()));
  }
  std::printf("fetch_latency_us: p50 %.1f p99 %.1f\n", pct(0.5), pct(0.99));
  std::printf("errors: %lld\n", static_cast<long long>(stats.errors.load()));
  std::printf("hit_rate: %.1f%%\n", hit_rate);
  std::printf("mismatches: %lld\n", static_cast<long long>(stats.mismatches.load()));
  std::printf("corrupt_served: %lld\n", static_cast<long long>(stats.corrupt_served.load()));
  return stats.mismatches == 0 && stats.corrupt_served == 0 && stats.errors == 0 ? 0 : 1;
}
