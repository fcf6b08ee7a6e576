#include "apps/prompt_cache_sim/processes.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace sim {
namespace {

struct Worker {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout: its report
  int err = -1;  // read end of its stderr: why it failed, if it did
  std::string text, errors;
};

bool Spawn(const std::vector<std::string>& argv, int index, Worker& w) {
  int fds[2], err_fds[2];
  if (pipe(fds) != 0) return false;
  if (pipe(err_fds) != 0) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  std::vector<std::string> args = argv;
  args.push_back("--worker");
  args.push_back(std::to_string(index));
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {fds[0], fds[1], err_fds[0], err_fds[1]}) close(fd);
    return false;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(err_fds[1], STDERR_FILENO);
    for (int fd : {fds[0], fds[1], err_fds[0], err_fds[1]}) close(fd);
#if KVSTORE_HAVE_PROC_SELF
    execv("/proc/self/exe", cargs.data());
#else
    // No /proc/self/exe (macOS, the BSDs): argv[0], a path or a name the
    // shell found on PATH (this program never changes its directory).
    execvp(cargs[0], cargs.data());
#endif
    _exit(127);
  }
  close(fds[1]);
  close(err_fds[1]);
  w.pid = pid;
  w.out = fds[0];
  w.err = err_fds[0];
  return true;
}

// Reads every worker's stdout and stderr to their ends (all at once, so no
// pipe fills up).
void Drain(std::vector<Worker>& workers) {
  for (;;) {
    fd_set set;
    FD_ZERO(&set);
    int max = -1;
    for (const Worker& w : workers) {
      for (int fd : {w.out, w.err}) {
        if (fd < 0) continue;
        FD_SET(fd, &set);
        max = std::max(max, fd);
      }
    }
    if (max < 0) return;
    if (select(max + 1, &set, nullptr, nullptr, nullptr) < 0) continue;
    for (Worker& w : workers) {
      for (auto [fd, text] : {std::pair{&w.out, &w.text}, std::pair{&w.err, &w.errors}}) {
        if (*fd < 0 || !FD_ISSET(*fd, &set)) continue;
        char buf[4096];
        const ssize_t n = read(*fd, buf, sizeof(buf));
        if (n > 0) {
          text->append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          close(*fd);
          *fd = -1;
        }
      }
    }
  }
}

// The last line a failed worker printed on stderr: its error.
std::string LastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t start = text.rfind('\n');
  return start == std::string::npos ? text : text.substr(start + 1);
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
      std::fputs(workers[i].errors.c_str(), stderr);
      report.LostProcess();
      continue;
    }
    if (!report.AddWorkerOutput(workers[i].text)) {
      const std::string why = LastLine(workers[i].errors);
      std::fprintf(stderr, "prompt_cache_sim: worker %zu (pid %d) exited with status %d and no report: %s\n", i,
                   static_cast<int>(workers[i].pid), WEXITSTATUS(status),
                   why.empty() ? "it printed no error" : why.c_str());
      ok = false;
    } else if (!workers[i].errors.empty()) {
      std::fputs(workers[i].errors.c_str(), stderr);  // warnings of a worker that succeeded
    }
  }
  return ok;
}

}  // namespace sim
