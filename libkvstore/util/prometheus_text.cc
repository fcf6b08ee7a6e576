#include "libkvstore/util/prometheus_text.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace kvstore {
namespace {

[[maybe_unused]] bool ValidName(std::string_view name, bool label) {
  if (name.empty()) return false;
  if (label && name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string_view TypeName(PrometheusTextWriter::Type type) {
  switch (type) {
    case PrometheusTextWriter::Type::kCounter: return "counter";
    case PrometheusTextWriter::Type::kGauge: return "gauge";
    case PrometheusTextWriter::Type::kHistogram: return "histogram";
  }
  return "untyped";
}

// Backslash and newline escaped (HELP text); label values escape '"' too.
std::string Escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\' || (quote && c == '"')) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string PrometheusTextWriter::EscapeLabelValue(std::string_view value) { return Escape(value, true); }
std::string PrometheusTextWriter::EscapeHelp(std::string_view help) { return Escape(help, false); }

std::string PrometheusTextWriter::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

void PrometheusTextWriter::Family(std::string_view name, Type type, std::string_view help) {
  assert(ValidName(name, false));
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += EscapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += TypeName(type);
  out_ += '\n';
}

void PrometheusTextWriter::Series(std::string_view name, Labels labels, std::span<const Label> extra) {
  assert(ValidName(name, false));
  out_ += name;
  if (labels.size() + extra.size() == 0) return;
  char sep = '{';
  const auto add = [&](const Label& label) {
    assert(ValidName(label.first, true));
    out_ += sep;
    out_ += label.first;
    out_ += "=\"";
    out_ += EscapeLabelValue(label.second);
    out_ += '"';
    sep = ',';
  };
  for (const Label& label : labels) add(label);
  for (const Label& label : extra) add(label);
  out_ += '}';
}

void PrometheusTextWriter::Sample(std::string_view name, Labels labels, double value) {
  Series(name, labels);
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

void PrometheusTextWriter::Sample(std::string_view name, Labels labels, int64_t value) {
  Series(name, labels);
  out_ += ' ';
  out_ += std::to_string(value);
  out_ += '\n';
}

void PrometheusTextWriter::Histogram(std::string_view name, Labels labels, std::span<const double> bounds,
                                     std::span<const int64_t> counts, double sum) {
  assert(counts.size() == bounds.size() + 1);
  const std::string bucket = std::string(name) + "_bucket";
  int64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le = i < bounds.size() ? FormatValue(bounds[i]) : "+Inf";
    const Label extra[] = {{"le", le}};
    Series(bucket, labels, extra);
    out_ += ' ';
    out_ += std::to_string(cumulative);
    out_ += '\n';
  }
  Sample(std::string(name) + "_sum", labels, sum);
  Sample(std::string(name) + "_count", labels, cumulative);
}

}  // namespace kvstore
