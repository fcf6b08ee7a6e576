// kvtool's signal handling: an interrupted write leaves no temp file, and a
// file-size limit is an error that names OUT rather than a silent kill.
#include <signal.h>

#include "apps/kvtool/kvtool.h"
#include "kvstore/env.h"

namespace kvtool {
namespace {

// Removes the temp files of writes in progress (async-signal-safe), then
// dies of the same signal, so the caller sees how kvtool ended.
void RemoveTempFilesAndDie(int sig) {
  kvstore::RemoveTempFilesInProgress();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void InstallSignalHandlers() {
  struct sigaction action = {};
  action.sa_handler = RemoveTempFilesAndDie;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    // A signal ignored when kvtool started (nohup, a shell's background
    // job) stays ignored.
    struct sigaction old = {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &action, nullptr);
  }
  // Over a file-size limit (ulimit -f) write(2) then fails with EFBIG, which
  // is reported naming OUT, and the temp file is removed, instead of the
  // process being killed with the temp file left behind.
  signal(SIGXFSZ, SIG_IGN);
}

}  // namespace kvtool
