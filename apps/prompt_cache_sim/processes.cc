#include "apps/prompt_cache_sim/processes.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace sim {
namespace {

struct Worker {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
  std::string text;
};

bool Spawn(const std::vector<std::string>& argv, int index, Worker& w) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  std::vector<std::string> args = argv;
  args.push_back("--worker");
  args.push_back(std::to_string(index));
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv("/proc/self/exe", cargs.data());
    _exit(127);
  }
  close(fds[1]);
  w.pid = pid;
  w.out = fds[0];
  return true;
}

// Reads every worker's output to its end (all at once, so no pipe fills up).
void Drain(std::vector<Worker>& workers) {
  size_t open = workers.size();
  while (open > 0) {
    fd_set set;
    FD_ZERO(&set);
    int max = -1;
    for (const Worker& w : workers) {
      if (w.out < 0) continue;
      FD_SET(w.out, &set);
      max = std::max(max, w.out);
    }
    if (select(max + 1, &set, nullptr, nullptr, nullptr) < 0) continue;
    for (Worker& w : workers) {
      if (w.out < 0 || !FD_ISSET(w.out, &set)) continue;
      char buf[4096];
      const ssize_t n = read(w.out, buf, sizeof(buf));
      if (n > 0) {
        w.text.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(w.out);
        w.out = -1;
        --open;
      }
    }
  }
}

}  // namespace

bool RunWorkerProcesses(const std::vector<std::string>& argv, int processes, Report& report) {
  std::vector<Worker> workers(static_cast<size_t>(processes));
  for (int i = 0; i < processes; ++i) {
    if (!Spawn(argv, i, workers[static_cast<size_t>(i)])) {
      std::fprintf(stderr, "prompt_cache_sim: cannot start worker %d: %s\n", i, std::strerror(errno));
      return false;
    }
  }
  std::printf("processes: %d started (pids", processes);
  for (const Worker& w : workers) std::printf(" %d", static_cast<int>(w.pid));
  std::printf(")\n");
  std::fflush(stdout);
  Drain(workers);
  bool ok = true;
  for (size_t i = 0; i < workers.size(); ++i) {
    int status = 0;
    waitpid(workers[i].pid, &status, 0);
    if (WIFSIGNALED(status)) {
      std::printf("process %zu (pid %d) killed by signal %d\n", i, static_cast<int>(workers[i].pid),
                  WTERMSIG(status));
      report.LostProcess();
      continue;
    }
    if (!report.AddWorkerOutput(workers[i].text)) {
      std::fprintf(stderr, "prompt_cache_sim: worker %zu exited with status %d:\n%s", i, WEXITSTATUS(status),
                   workers[i].text.c_str());
      ok = false;
    }
  }
  return ok;
}

}  // namespace sim
