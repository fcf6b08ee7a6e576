// PrometheusTextWriter: the Prometheus text exposition format (HELP/TYPE
// lines, label and help escaping, value forms, histogram buckets), and the
// latency histogram of the prompt-cache metrics.
#include "libkvstore/util/prometheus_text.h"

#include <limits>

#include "kvstore/prompt_cache_metrics.h"
#include "testutil.h"

namespace kvstore {
namespace {

using Type = PrometheusTextWriter::Type;

TEST(PrometheusTextTest, FamiliesSamplesAndEscaping) {
  PrometheusTextWriter w;
  w.Family("app_requests_total", Type::kCounter, "Requests, by path.\nSecond line with a \\ backslash.");
  w.Sample("app_requests_total", {{"path", "/a\"b\\c\nd"}, {"code", "200"}}, int64_t{7});
  w.Family("app_temperature", Type::kGauge, "A gauge.");
  w.Sample("app_temperature", {}, 0.5);
  w.Sample("app_temperature", {{"where", "inf"}}, std::numeric_limits<double>::infinity());
  w.Sample("app_temperature", {{"where", "ninf"}}, -std::numeric_limits<double>::infinity());
  w.Sample("app_temperature", {{"where", "nan"}}, std::numeric_limits<double>::quiet_NaN());
  w.Sample("app_temperature", {{"where", "big"}}, 1e21);
  EXPECT_EQ(w.text(),
            "# HELP app_requests_total Requests, by path.\\nSecond line with a \\\\ backslash.\n"
            "# TYPE app_requests_total counter\n"
            "app_requests_total{path=\"/a\\\"b\\\\c\\nd\",code=\"200\"} 7\n"
            "# HELP app_temperature A gauge.\n"
            "# TYPE app_temperature gauge\n"
            "app_temperature 0.5\n"
            "app_temperature{where=\"inf\"} +Inf\n"
            "app_temperature{where=\"ninf\"} -Inf\n"
            "app_temperature{where=\"nan\"} NaN\n"
            "app_temperature{where=\"big\"} 1e+21\n");
}

TEST(PrometheusTextTest, HistogramBucketsAreCumulativeAndEndWithInf) {
  PrometheusTextWriter w;
  w.Family("rpc_seconds", Type::kHistogram, "Latency.");
  const double bounds[] = {0.001, 0.25, 2};
  const int64_t counts[] = {3, 0, 2, 1};
  w.Histogram("rpc_seconds", {{"result", "ok"}}, bounds, counts, 4.5);
  EXPECT_EQ(w.text(),
            "# HELP rpc_seconds Latency.\n"
            "# TYPE rpc_seconds histogram\n"
            "rpc_seconds_bucket{result=\"ok\",le=\"0.001\"} 3\n"
            "rpc_seconds_bucket{result=\"ok\",le=\"0.25\"} 3\n"
            "rpc_seconds_bucket{result=\"ok\",le=\"2\"} 5\n"
            "rpc_seconds_bucket{result=\"ok\",le=\"+Inf\"} 6\n"
            "rpc_seconds_sum{result=\"ok\"} 4.5\n"
            "rpc_seconds_count{result=\"ok\"} 6\n");
}

TEST(PrometheusTextTest, LatencyHistogramBuckets) {
  LatencyHistogram h;
  h.Record(0.0001);  // on a bound: that bucket (le is "less or equal")
  h.Record(0.003);
  h.Record(100);
  EXPECT_EQ(h.counts[0], 1);
  EXPECT_EQ(h.counts[5], 1);  // (0.0025, 0.005]
  EXPECT_EQ(h.counts.back(), 1);
  EXPECT_EQ(h.count, 3);
  EXPECT_DOUBLE_EQ(h.sum_seconds, 100.0031);
  LatencyHistogram sum = h;
  sum.Add(h);
  EXPECT_EQ(sum.count, 6);
  EXPECT_EQ(sum.counts.back(), 2);
}

}  // namespace
}  // namespace kvstore
