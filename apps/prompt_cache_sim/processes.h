// Server processes for prompt_cache_sim --redis: the parent starts one
// worker process per server (this program again, with --worker I), reads
// the counters each prints, and sums them; a worker killed by a signal is
// counted as lost, not as a failure.
#ifndef KVSTORE_APPS_PROMPT_CACHE_SIM_PROCESSES_H_
#define KVSTORE_APPS_PROMPT_CACHE_SIM_PROCESSES_H_

#include <string>
#include <vector>

#include "apps/prompt_cache_sim/report.h"

namespace sim {

// Runs `argv` plus "--worker I" for I in [0, processes) at once and adds
// what each reports to `report`. False (after printing why) when a worker
// cannot be started or exits with an error of its own.
bool RunWorkerProcesses(const std::vector<std::string>& argv, int processes, Report& report);

}  // namespace sim

#endif  // KVSTORE_APPS_PROMPT_CACHE_SIM_PROCESSES_H_
