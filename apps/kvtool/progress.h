// A progress bar on stderr for long operations, drawn only when stderr is a
// terminal and --quiet is not given (nothing is drawn into pipes or logs).
#ifndef KVSTORE_APPS_KVTOOL_PROGRESS_H_
#define KVSTORE_APPS_KVTOOL_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "kvstore/prompt_cache_file.h"

namespace kvtool {

class ProgressBar {
 public:
  ProgressBar(std::string label, bool quiet);
  ~ProgressBar();  // Done()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // The callback to hand to the library (empty when nothing is drawn).
  kvstore::ProgressFn Callback();

  // Erases the bar, leaving the cursor at the start of an empty line, so
  // that what is printed next (the summary, an error) starts a line. Call
  // it when the operation returns, before printing; nothing is drawn after.
  void Done();

 private:
  void Draw(uint64_t done, uint64_t total);

  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace kvtool

#endif  // KVSTORE_APPS_KVTOOL_PROGRESS_H_
