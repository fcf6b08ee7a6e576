#include "apps/prompt_cache_sim/metrics.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace sim {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string Number(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

}  // namespace

std::optional<std::string> SumExpositions(const std::vector<std::string>& texts) {
  if (texts.empty()) return std::string();
  std::vector<std::string> sum = Lines(texts[0]);
  std::vector<double> values(sum.size(), 0);
  for (const std::string& text : texts) {
    const std::vector<std::string> lines = Lines(text);
    if (lines.size() != sum.size()) return std::nullopt;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].starts_with('#')) {
        if (lines[i] != sum[i]) return std::nullopt;
        continue;
      }
      const size_t space = lines[i].rfind(' ');
      if (space == std::string::npos || lines[i].compare(0, space, sum[i], 0, sum[i].rfind(' ')) != 0) {
        return std::nullopt;
      }
      double v = 0;
      const char* first = lines[i].data() + space + 1;
      const char* last = lines[i].data() + lines[i].size();
      if (std::from_chars(first, last, v).ptr != last) return std::nullopt;
      values[i] += v;
    }
  }
  std::string out;
  for (size_t i = 0; i < sum.size(); ++i) {
    out += sum[i].starts_with('#') ? sum[i] : sum[i].substr(0, sum[i].rfind(' ') + 1) + Number(values[i]);
    out += '\n';
  }
  return out;
}

void SimMetrics::AddServer(const kvstore::PromptCacheMetrics& metrics) { local_.Add(metrics); }

std::optional<std::string> SimMetrics::Text() const {
  if (worker_texts_.empty()) return kvstore::PrometheusText(local_);
  std::optional<std::string> sum = SumExpositions(worker_texts_);
  if (!sum) std::fprintf(stderr, "prompt_cache_sim: the workers' metrics do not line up\n");
  return sum;
}

bool SimMetrics::Write(const std::string& path, std::string_view sim_samples) const {
  const std::optional<std::string> text = Text();
  if (!text) return false;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << *text << sim_samples;
  out.close();
  if (!out) {
    std::fprintf(stderr, "prompt_cache_sim: cannot write the metrics to %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace sim
