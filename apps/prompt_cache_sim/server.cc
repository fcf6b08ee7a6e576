#include "apps/prompt_cache_sim/server.h"

#include <chrono>
#include <thread>

#include "kvstore/kv_cache.h"

namespace sim {
namespace {

int64_t TensorBytes(const kvstore::PromptCache& cache) {
  int64_t bytes = 0;
  for (const auto& layer : cache) {
    auto state = layer->State();
    if (state.ok()) bytes += static_cast<int64_t>(state->nbytes());
  }
  return bytes;
}

}  // namespace

void Counters::Add(const Counters& o) {
  for (const auto& [name, field] : kCounterFields) this->*field += o.*field;
  latency_us.insert(latency_us.end(), o.latency_us.begin(), o.latency_us.end());
}

SimServer::SimServer(const Workload& workload, const kvstore::ModelFingerprint& model, const ServerOptions& options)
    : workload_(workload), model_(model), options_(options), cache_(options.cache) {}

bool SimServer::FirstInsert(std::span<const int32_t> tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 0x100000001b3ull;
  std::lock_guard<std::mutex> l(mu_);
  return inserted_.insert(h ^ tokens.size()).second;
}

void SimServer::Insert(const Request& r, const kvstore::PromptCache& layers, int64_t reused, Counters& c) {
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  if (FirstInsert(r.tokens)) c.whole_file_bytes += TensorBytes(layers);
  // Like a server checkpointing shared prefixes: the system prompt and each
  // turn boundary (trimmed copy-on-write copies).
  std::vector<kvstore::PromptCacheCheckpoint> checkpoints;
  for (int64_t b : r.boundaries) {
    if (b >= n || b <= reused) continue;
    kvstore::PromptCacheCheckpoint cp{b, {}};
    for (const auto& layer : layers) {
      cp.cache.push_back(std::shared_ptr<kvstore::Cache>(layer->Copy()));
      if (!cp.cache.back()->Trim(n - b).ok()) c.errors++;
    }
    if (FirstInsert(std::span(r.tokens).first(static_cast<size_t>(b)))) c.whole_file_bytes += TensorBytes(cp.cache);
    checkpoints.push_back(std::move(cp));
  }
  if (!cache_.Insert(ScopeOf(r), r.tokens, layers, {.checkpoints = checkpoints}).ok()) c.errors++;
}

kvstore::PromptScope SimServer::ScopeOf(const Request& r) const {
  kvstore::PromptScope scope{model_.digest().ToHex(), model_};
  if (r.tenant >= 0 && !options_.salts.empty()) scope.tenant = options_.salts[static_cast<size_t>(r.tenant)];
  return scope;
}

// Some row is another tenant's (a cache one tenant extended from another's
// prefix holds rows of both).
bool SimServer::AnotherTenants(const kvstore::PromptCache& cache, const Request& r, int64_t n) const {
  for (int64_t row = 0; row < n; ++row) {
    for (int t = -1; t < workload_.options().tenants; ++t) {
      if (t != r.tenant && workload_.RowsMatch(cache, r.tokens, row, row + 1, t)) return true;
    }
  }
  return false;
}

void SimServer::Serve(std::mt19937_64& rng, Counters& c) {
  const Request r = workload_.Next(rng);
  const auto t0 = std::chrono::steady_clock::now();
  auto hit = cache_.Fetch(ScopeOf(r), r.tokens);
  c.latency_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  c.requests++;
  c.tokens += static_cast<int64_t>(r.tokens.size());
  if (!hit.ok()) {
    c.errors++;
    return;
  }
  kvstore::PromptCache layers;
  int64_t reused = 0;
  if (*hit) {
    c.hits++;
    if ((*hit)->tier == kvstore::PromptCacheTier::kDisk) c.disk_hits++;
    if ((*hit)->tier == kvstore::PromptCacheTier::kShared) c.shared_tier_hits++;
    reused = (*hit)->reused;
    layers = std::move((*hit)->cache);
    // Every reused row must equal a fresh computation for this tenant.
    if (!workload_.Matches(layers, r.tokens, reused, r.tenant)) {
      if (AnotherTenants(layers, r, reused)) {
        c.cross_tenant_hits++;
        return;
      }
      c.mismatches++;
      if ((*hit)->tier != kvstore::PromptCacheTier::kMemory) c.corrupt_served++;
      return;
    }
    c.reused += reused;
    c.shared_hits += (*hit)->foreign_tokens;
  } else {
    for (int64_t l = 0; l < workload_.options().layers; ++l) layers.push_back(std::make_shared<kvstore::KVCache>());
  }
  if (!workload_.Extend(layers, r.tokens, reused, static_cast<int64_t>(r.tokens.size()), r.tenant)) {
    c.errors++;
    return;
  }
  Insert(r, layers, reused, c);
}

void SimServer::Run() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < options_.threads; ++t) {
    pool.emplace_back([this, t, deadline] {
      std::mt19937_64 rng(options_.seed * 1000003 + static_cast<uint64_t>(t));
      Counters local;
      while (next_.fetch_add(1) < options_.requests &&
             (options_.seconds <= 0 || std::chrono::steady_clock::now() < deadline)) {
        Serve(rng, local);
      }
      std::lock_guard<std::mutex> l(mu_);
      counters_.Add(local);
    });
  }
  for (auto& t : pool) t.join();
  cache_.Flush();  // the queued disk and shared-tier writes
}

Counters SimServer::counters() const {
  std::lock_guard<std::mutex> l(mu_);
  return counters_;
}

}  // namespace sim
