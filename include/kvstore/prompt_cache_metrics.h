// PromptCacheMetrics: what ServerPromptCache counts, in one shape for C++
// servers and the Python binding, and its rendering in the Prometheus text
// exposition format (version 0.0.4).
//
//   kvstore::PromptCacheMetrics m = cache.metrics();
//   std::string text = kvstore::PrometheusText(m);  // serve it at /metrics
//
// The families (every name starts with kvstore_prompt_cache_):
//   fetches_total                       counter
//   hits_total{tier}                    counter: fetches the tier served
//   misses_total{tier}                  counter: fetches that asked the tier and were not served by it
//   tokens_served_total{tier}           counter
//   bytes_served_total{tier}            counter: cache bytes handed out (Nbytes)
//   writes_total{tier}                  counter: persistent writes done (disk, shared)
//   bytes_written_total{tier}           counter: disk: cache bytes; shared: value bytes stored
//   write_queue_drops_total{tier}       counter: writes dropped (queue full, or after close)
//   write_errors_total{tier}            counter
//   refused_total{tier,reason}          counter: stored entries refused, never served
//   inserts_refused_total{reason}       counter: inserts refused before anything was stored
//   unknown_model_fetches_total         counter: memory misses that reached no persistent tier
//                                       for want of a fingerprint
//   entries{tier}, bytes{tier}          gauges: memory and disk
//   fetch_duration_seconds{result}      histogram: Fetch's time, by the tier that served it
//                                       ("miss" when none did)
// tier is "memory", "disk" or "shared"; reason is one of RefusalReasonName.
//
// Thread safety: plain values.
#ifndef KVSTORE_PROMPT_CACHE_METRICS_H_
#define KVSTORE_PROMPT_CACHE_METRICS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvstore {

enum class PromptCacheTier { kMemory, kDisk, kShared };
inline constexpr size_t kNumPromptCacheTiers = 3;
std::string_view PromptCacheTierName(PromptCacheTier tier);  // "memory", "disk", "shared"

// Why a tier refused an entry it holds, or an insert.
enum class RefusalReason : uint8_t {
  kCorrupt,      // unreadable, or failing its digests
  kForged,       // unsealed or failing the HMAC (shared tier with a secret)
  kWrongKey,     // valid, but holding another key than the one asked for
  kFingerprint,  // written for another model configuration
  kTokenCount,   // layers holding another number of tokens than the key
};
inline constexpr size_t kNumRefusalReasons = 5;
// The reason's index in the refusal arrays below.
inline constexpr size_t RefusalIndex(RefusalReason reason) { return static_cast<size_t>(reason); }
// "corrupt", "forged", "wrong_key", "fingerprint", "token_count".
std::string_view RefusalReasonName(RefusalReason reason);

// A latency histogram with fixed bucket bounds, in seconds.
struct LatencyHistogram {
  // Upper bounds of the buckets before +Inf: 100 us to 10 s.
  static constexpr std::array<double, 16> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  std::array<int64_t, kBounds.size() + 1> counts{};  // per bucket (not cumulative); the last is +Inf
  double sum_seconds = 0;
  int64_t count = 0;

  void Record(double seconds);
  void Add(const LatencyHistogram& other);
};

struct TierMetrics {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t tokens_served = 0;
  int64_t bytes_served = 0;
  int64_t writes = 0;  // disk and shared only, as the write counters below
  int64_t bytes_written = 0;
  int64_t write_queue_drops = 0;
  int64_t write_errors = 0;
  std::array<int64_t, kNumRefusalReasons> refused{};  // by RefusalReason
  int64_t entries = 0;  // gauges: memory and disk
  int64_t bytes = 0;
};

struct PromptCacheMetrics {
  int64_t fetches = 0;
  int64_t unknown_model_fetches = 0;
  std::array<TierMetrics, kNumPromptCacheTiers> tiers{};           // by PromptCacheTier
  std::array<int64_t, kNumRefusalReasons> inserts_refused{};       // by RefusalReason
  std::array<LatencyHistogram, kNumPromptCacheTiers + 1> fetch_latency{};  // by tier, then misses

  TierMetrics& tier(PromptCacheTier t) { return tiers[static_cast<size_t>(t)]; }
  const TierMetrics& tier(PromptCacheTier t) const { return tiers[static_cast<size_t>(t)]; }
  // Sums every counter, gauge and bucket (several servers as one).
  void Add(const PromptCacheMetrics& other);
};

// The metrics in the Prometheus text exposition format: for every family a
// # HELP and a # TYPE line, then its samples; histograms as cumulative
// _bucket{le} samples ending with le="+Inf", then _sum and _count.
std::string PrometheusText(const PromptCacheMetrics& metrics);

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_METRICS_H_
