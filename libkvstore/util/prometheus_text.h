// PrometheusTextWriter: writes metrics in the Prometheus text exposition
// format (version 0.0.4, https://prometheus.io/docs/instrumenting/exposition_formats/):
//
//   # HELP <name> <help, with \ and newline escaped>
//   # TYPE <name> counter|gauge|histogram
//   <name>{<label>="<value, with \ " and newline escaped>",...} <value>
//
// A histogram's samples are <name>_bucket{...,le="<bound>"} with cumulative
// counts, the last le="+Inf" (equal to _count), then <name>_sum and
// <name>_count. Values print in the shortest form that reads back exactly;
// infinities and NaN as +Inf, -Inf and NaN.
//
// Names and label names are the caller's constants: REQUIRES that they match
// [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no colon, no leading "__"), and that each
// family is started once, before its samples. Not thread-safe.
#ifndef KVSTORE_LIBKVSTORE_UTIL_PROMETHEUS_TEXT_H_
#define KVSTORE_LIBKVSTORE_UTIL_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace kvstore {

class PrometheusTextWriter {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  using Label = std::pair<std::string_view, std::string_view>;
  using Labels = std::initializer_list<Label>;

  // The # HELP and # TYPE lines of a family.
  void Family(std::string_view name, Type type, std::string_view help);
  // One sample of the current family.
  void Sample(std::string_view name, Labels labels, double value);
  void Sample(std::string_view name, Labels labels, int64_t value);
  // The samples of one histogram series: `counts` per bucket (not
  // cumulative), one per bound plus the last for +Inf; `bounds` ascending.
  // REQUIRES: counts.size() == bounds.size() + 1.
  void Histogram(std::string_view name, Labels labels, std::span<const double> bounds,
                 std::span<const int64_t> counts, double sum);

  const std::string& text() const { return out_; }

  static std::string EscapeLabelValue(std::string_view value);
  static std::string EscapeHelp(std::string_view help);
  static std::string FormatValue(double value);

 private:
  void Series(std::string_view name, Labels labels, std::span<const Label> extra = {});

  std::string out_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_UTIL_PROMETHEUS_TEXT_H_
