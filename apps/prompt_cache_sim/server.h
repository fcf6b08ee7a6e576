// One simulated inference server: its ServerPromptCache (memory, optional
// disk and shared tiers) and request threads that fetch, check every reused
// row against a fresh computation, prefill the rest and insert.
#ifndef KVSTORE_APPS_PROMPT_CACHE_SIM_SERVER_H_
#define KVSTORE_APPS_PROMPT_CACHE_SIM_SERVER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "apps/prompt_cache_sim/workload.h"
#include "kvstore/server_prompt_cache.h"

namespace sim {

// What a server did; summed over servers by the report.
struct Counters {
  int64_t requests = 0, hits = 0, disk_hits = 0, shared_tier_hits = 0, reused = 0, tokens = 0;
  int64_t shared_hits = 0;  // reused tokens from chunks another server wrote
  int64_t mismatches = 0, corrupt_served = 0, errors = 0;
  int64_t cross_tenant_hits = 0;  // hits whose rows are another tenant's (--tenants)
  int64_t whole_file_bytes = 0;  // what the inserts take as whole files (tensors of each distinct key)
  std::vector<double> latency_us;
  void Add(const Counters& other);
};

// The integer counters by name (what Add sums and workers report).
inline constexpr std::pair<const char*, int64_t Counters::*> kCounterFields[] = {
    {"requests", &Counters::requests},     {"hits", &Counters::hits},
    {"disk_hits", &Counters::disk_hits},   {"shared_tier_hits", &Counters::shared_tier_hits},
    {"reused", &Counters::reused},         {"tokens", &Counters::tokens},
    {"shared_hits", &Counters::shared_hits}, {"mismatches", &Counters::mismatches},
    {"corrupt_served", &Counters::corrupt_served}, {"errors", &Counters::errors},
    {"whole_file_bytes", &Counters::whole_file_bytes}, {"cross_tenant_hits", &Counters::cross_tenant_hits}};

struct ServerOptions {
  int threads = 2;
  int64_t requests = 200;
  double seconds = 0;  // > 0: stop taking requests after this long
  uint64_t seed = 1;  // request order of this server
  kvstore::ServerPromptCacheOptions cache;
  // A salt per tenant (WorkloadOptions::tenants); empty: requests carry
  // none, and tenants share prefixes (what the cross-tenant check catches).
  std::vector<kvstore::TenantSalt> salts;
};

class SimServer {
 public:
  SimServer(const Workload& workload, const kvstore::ModelFingerprint& model, const ServerOptions& options);
  // Serves options.requests requests on options.threads threads.
  void Run();
  Counters counters() const;
  const kvstore::ServerPromptCache& cache() const { return cache_; }

 private:
  void Serve(std::mt19937_64& rng, Counters& c);
  void Insert(const Request& r, const kvstore::PromptCache& layers, int64_t reused, Counters& c);
  kvstore::PromptScope ScopeOf(const Request& r) const;
  // Whether any of `cache`'s first n rows is that of a tenant other than r's.
  bool AnotherTenants(const kvstore::PromptCache& cache, const Request& r, int64_t n) const;

  const Workload& workload_;
  const kvstore::ModelFingerprint model_;
  ServerOptions options_;
  kvstore::ServerPromptCache cache_;
  // Whether this server has stored `tokens` before (a whole-file tier would
  // replace that file, not add one).
  bool FirstInsert(std::span<const int32_t> tokens);

  std::atomic<int64_t> next_{0};
  mutable std::mutex mu_;
  Counters counters_;
  std::unordered_set<uint64_t> inserted_;  // hashes of the keys stored; guarded by mu_
};

}  // namespace sim

#endif  // KVSTORE_APPS_PROMPT_CACHE_SIM_SERVER_H_
