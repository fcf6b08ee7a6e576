// prompt_cache_sim --metrics FILE: the servers' counters in the Prometheus
// text format (kvstore::PrometheusText), summed over every server of the
// run, written once the run ends.
#ifndef KVSTORE_APPS_PROMPT_CACHE_SIM_METRICS_H_
#define KVSTORE_APPS_PROMPT_CACHE_SIM_METRICS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/prompt_cache_metrics.h"

namespace sim {

class SimMetrics {
 public:
  // A server of this process.
  void AddServer(const kvstore::PromptCacheMetrics& metrics);
  // A worker process's exposition (PrometheusText of its servers).
  void AddWorkerText(std::string text) { worker_texts_.push_back(std::move(text)); }

  // The exposition of everything added; nullopt (after printing why) when
  // the workers' expositions do not line up.
  std::optional<std::string> Text() const;
  // Writes Text(), then `sim_samples` (the simulator's own families), to
  // `path`; false after printing why it could not.
  bool Write(const std::string& path, std::string_view sim_samples = {}) const;

 private:
  kvstore::PromptCacheMetrics local_;
  std::vector<std::string> worker_texts_;
};

// Sums expositions that list the same samples in the same order (what
// PrometheusText renders for any metrics): every sample line's value is
// the sum of that line's values. nullopt when the lines differ.
std::optional<std::string> SumExpositions(const std::vector<std::string>& texts);

}  // namespace sim

#endif  // KVSTORE_APPS_PROMPT_CACHE_SIM_METRICS_H_
