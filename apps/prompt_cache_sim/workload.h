// The simulated traffic: shared system prompts and branching
// conversations, and "prefill" that computes each token's K/V as a
// deterministic function of (layer, position, token, hash of the prefix),
// so that any reused cache can be checked bit for bit against a fresh
// computation.
#ifndef KVSTORE_APPS_PROMPT_CACHE_SIM_WORKLOAD_H_
#define KVSTORE_APPS_PROMPT_CACHE_SIM_WORKLOAD_H_

#include <cstdint>
#include <random>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/cache.h"

namespace sim {

struct WorkloadOptions {
  int systems = 3;             // shared system prompts
  int system_tokens = 48;
  int conversations = 12;      // each on one system prompt
  int turns = 3;               // turns per conversation path
  int branches = 2;            // alternatives of each turn (edits, regenerations)
  int turn_tokens = 16;
  int tail_tokens = 16;        // the new message: up to this many random tokens
  int64_t layers = 4, heads = 2, dim = 16;
  uint64_t seed = 1;
  int tenants = 0;             // > 0: conversation c belongs to tenant (c / systems) % tenants
};

struct Request {
  std::vector<int32_t> tokens;
  std::vector<int64_t> boundaries;  // end of the system prompt and of each turn
  int tenant = -1;                  // none
};

class Workload {
 public:
  explicit Workload(const WorkloadOptions& options);
  const WorkloadOptions& options() const { return options_; }

  // A request: a conversation, a path through its turn tree, a new message.
  Request Next(std::mt19937_64& rng) const;

  // The K/V of a tenant's tokens depend on the tenant (-1: none), so that a
  // cache served to another tenant is told apart by its bytes.
  // A fresh cache of `layers` KVCaches holding tokens [0, n).
  kvstore::PromptCache Prefill(const std::vector<int32_t>& tokens) const;
  // Appends tokens [from, to) to every layer. False on an error.
  bool Extend(kvstore::PromptCache& cache, const std::vector<int32_t>& tokens, int64_t from, int64_t to,
              int tenant = -1) const;
  // Whether `cache` holds exactly the K/V of the tenant's tokens [0, n), bit for bit.
  bool Matches(const kvstore::PromptCache& cache, const std::vector<int32_t>& tokens, int64_t n,
               int tenant = -1) const;
  // Whether rows [from, to) of `cache` are the tenant's, bit for bit.
  bool RowsMatch(const kvstore::PromptCache& cache, const std::vector<int32_t>& tokens, int64_t from, int64_t to,
                 int tenant) const;

 private:
  // K or V rows [from, to) of a layer: [1, heads, to - from, dim] F16.
  kvstore::Array Rows(const std::vector<int32_t>& tokens, const std::vector<uint64_t>& prefix, int64_t layer,
                      int64_t from, int64_t to, bool value) const;

  WorkloadOptions options_;
  std::vector<std::vector<int32_t>> systems_;
  std::vector<std::vector<std::vector<std::vector<int32_t>>>> turns_;  // [conversation][depth][branch]
};

}  // namespace sim

#endif  // KVSTORE_APPS_PROMPT_CACHE_SIM_WORKLOAD_H_
