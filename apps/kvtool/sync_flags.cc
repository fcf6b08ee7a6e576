// --sync / --no-sync: the durability of an output file (kvtool.h).
#include "apps/kvtool/kvtool.h"

namespace kvtool {

void AddSyncFlags(CLI::App* cmd, SyncFlags* flags) {
  CLI::Option* sync = cmd->add_flag("--sync", flags->sync,
                                    "fsync the output even when it is a new file (default: only when it replaces one)");
  CLI::Option* no_sync =
      cmd->add_flag("--no-sync", flags->no_sync, "never fsync the output, even over an existing file");
  sync->excludes(no_sync);
}

kvstore::Durability DurabilityOf(const SyncFlags& flags) {
  if (flags.sync) return kvstore::Durability::kAlways;
  if (flags.no_sync) return kvstore::Durability::kNone;
  return kvstore::Durability::kWhenReplacing;
}

}  // namespace kvtool
