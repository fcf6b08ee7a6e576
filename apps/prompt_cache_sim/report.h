// What prompt_cache_sim prints: the counters of every server, disk tier and
// shared tier, summed, in "name: value" lines that scripts grep. A worker
// process (--worker) prints its own counters for the parent instead.
#ifndef KVSTORE_APPS_PROMPT_CACHE_SIM_REPORT_H_
#define KVSTORE_APPS_PROMPT_CACHE_SIM_REPORT_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "apps/prompt_cache_sim/metrics.h"
#include "apps/prompt_cache_sim/server.h"
#include "kvstore/prompt_cache_store.h"
#include "kvstore/shared_prompt_cache.h"

namespace sim {

class Report {
 public:
  // Opens a disk tier, which indexes its directory while it serves;
  // nullptr (after printing the error) when it cannot be opened.
  std::unique_ptr<kvstore::PromptCacheStore> OpenStore(const std::string& dir, int64_t max_bytes);
  void AddServer(const SimServer& server);
  // Adds a disk tier's counters, and prints what it recovered at open.
  void AddStore(const kvstore::PromptCacheStore& store);
  void AddTier(const kvstore::SharedPromptCache::Stats& stats, const std::string& describe);
  void LostProcess() { ++lost_; }

  // Prints the summary; the exit status (0: no mismatch, corruption or error).
  int Print(int threads, int processes);
  // A worker's lines for its parent, and the parent's side: false when
  // `output` holds no report.
  void PrintWorker() const;
  bool AddWorkerOutput(std::string_view output);
  // Every server's counters (--metrics).
  const SimMetrics& metrics() const { return metrics_; }
  // The simulator's own checks in the Prometheus text format, for the
  // --metrics file: prompt_cache_sim_cross_tenant_hits.
  std::string SimSamples() const;

 private:
  Counters counters_;
  SimMetrics metrics_;
  int64_t entries_ = 0, bytes_ = 0;
  int64_t stores_ = 0, disk_entries_ = 0, disk_bytes_ = 0, disk_corrupt_ = 0, disk_mismatched_ = 0;
  std::optional<kvstore::SharedPromptCache::Stats> shared_;
  std::string shared_describe_;
  int64_t lost_ = 0;
};

}  // namespace sim

#endif  // KVSTORE_APPS_PROMPT_CACHE_SIM_REPORT_H_
