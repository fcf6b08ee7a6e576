#include "apps/kvtool/progress.h"

#include <unistd.h>

#include <cstdio>

#include "apps/kvtool/kvtool.h"

namespace kvtool {

ProgressBar::ProgressBar(std::string label, bool quiet)
    : label_(std::move(label)), enabled_(!quiet && isatty(STDERR_FILENO) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() { Done(); }

void ProgressBar::Done() {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  drawn_ = false;
  enabled_ = false;
}

kvstore::ProgressFn ProgressBar::Callback() {
  if (!enabled_) return {};
  return [this](uint64_t done, uint64_t total) { Draw(done, total); };
}

void ProgressBar::Draw(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  // At most ten redraws a second, the first after half a second; the final
  // state (done == total) is always drawn.
  if (done < total && (now - last_ < std::chrono::milliseconds(100) ||
                       now - start_ < std::chrono::milliseconds(500))) {
    return;
  }
  last_ = now;
  constexpr int kWidth = 30;
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  const int filled = static_cast<int>(fraction * kWidth);
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %3d%% %s / %s  %s/s\033[K", label_.c_str(), bar.c_str(),
               static_cast<int>(fraction * 100), HumanBytes(done).c_str(), HumanBytes(total).c_str(),
               HumanBytes(static_cast<uint64_t>(rate)).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace kvtool
