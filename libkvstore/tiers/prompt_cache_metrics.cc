// PromptCacheMetrics: sums, and the families of PrometheusText (the names
// and their meaning are listed in kvstore/prompt_cache_metrics.h).
#include "kvstore/prompt_cache_metrics.h"

#include <algorithm>

#include "libkvstore/util/prometheus_text.h"

namespace kvstore {
namespace {

using Type = PrometheusTextWriter::Type;

constexpr PromptCacheTier kTiers[] = {PromptCacheTier::kMemory, PromptCacheTier::kDisk, PromptCacheTier::kShared};
constexpr PromptCacheTier kPersistentTiers[] = {PromptCacheTier::kDisk, PromptCacheTier::kShared};
constexpr RefusalReason kReasons[] = {RefusalReason::kCorrupt, RefusalReason::kForged, RefusalReason::kWrongKey,
                                      RefusalReason::kFingerprint, RefusalReason::kTokenCount};

void AddArrays(std::span<int64_t> to, std::span<const int64_t> from) {
  for (size_t i = 0; i < to.size(); ++i) to[i] += from[i];
}

// One counter or gauge family with a sample per tier in `tiers`.
template <size_t N>
void PerTier(PrometheusTextWriter& w, const PromptCacheMetrics& m, std::string_view name, Type type,
             std::string_view help, const PromptCacheTier (&tiers)[N], int64_t TierMetrics::*field) {
  const std::string full = "kvstore_prompt_cache_" + std::string(name);
  w.Family(full, type, help);
  for (PromptCacheTier t : tiers) w.Sample(full, {{"tier", PromptCacheTierName(t)}}, m.tier(t).*field);
}

}  // namespace

std::string_view PromptCacheTierName(PromptCacheTier tier) {
  switch (tier) {
    case PromptCacheTier::kMemory: return "memory";
    case PromptCacheTier::kDisk: return "disk";
    case PromptCacheTier::kShared: return "shared";
  }
  return "unknown";
}

std::string_view RefusalReasonName(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kCorrupt: return "corrupt";
    case RefusalReason::kForged: return "forged";
    case RefusalReason::kWrongKey: return "wrong_key";
    case RefusalReason::kFingerprint: return "fingerprint";
    case RefusalReason::kTokenCount: return "token_count";
  }
  return "unknown";
}

void LatencyHistogram::Record(double seconds) {
  const auto bucket = std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin();
  ++counts[static_cast<size_t>(bucket)];
  sum_seconds += seconds;
  ++count;
}

void LatencyHistogram::Add(const LatencyHistogram& other) {
  AddArrays(counts, other.counts);
  sum_seconds += other.sum_seconds;
  count += other.count;
}

void PromptCacheMetrics::Add(const PromptCacheMetrics& o) {
  fetches += o.fetches;
  unknown_model_fetches += o.unknown_model_fetches;
  for (size_t i = 0; i < tiers.size(); ++i) {
    TierMetrics& t = tiers[i];
    const TierMetrics& u = o.tiers[i];
    for (int64_t TierMetrics::*f : {&TierMetrics::hits, &TierMetrics::misses, &TierMetrics::tokens_served,
                                    &TierMetrics::bytes_served, &TierMetrics::writes, &TierMetrics::bytes_written,
                                    &TierMetrics::write_queue_drops, &TierMetrics::write_errors,
                                    &TierMetrics::entries, &TierMetrics::bytes}) {
      t.*f += u.*f;
    }
    AddArrays(t.refused, u.refused);
  }
  AddArrays(inserts_refused, o.inserts_refused);
  for (size_t i = 0; i < fetch_latency.size(); ++i) fetch_latency[i].Add(o.fetch_latency[i]);
}

std::string PrometheusText(const PromptCacheMetrics& m) {
  PrometheusTextWriter w;
  w.Family("kvstore_prompt_cache_fetches_total", Type::kCounter, "Prompt-cache fetches.");
  w.Sample("kvstore_prompt_cache_fetches_total", {}, m.fetches);
  PerTier(w, m, "hits_total", Type::kCounter, "Fetches served by the tier.", kTiers, &TierMetrics::hits);
  PerTier(w, m, "misses_total", Type::kCounter, "Fetches that asked the tier and were not served by it.", kTiers,
          &TierMetrics::misses);
  PerTier(w, m, "tokens_served_total", Type::kCounter, "Prompt tokens covered by the caches the tier served.",
          kTiers, &TierMetrics::tokens_served);
  PerTier(w, m, "bytes_served_total", Type::kCounter, "Bytes of the caches the tier served.", kTiers,
          &TierMetrics::bytes_served);
  PerTier(w, m, "writes_total", Type::kCounter, "Caches written to the persistent tier.", kPersistentTiers,
          &TierMetrics::writes);
  PerTier(w, m, "bytes_written_total", Type::kCounter,
          "Bytes written to the persistent tier (disk: cache bytes; shared: value bytes stored).", kPersistentTiers,
          &TierMetrics::bytes_written);
  PerTier(w, m, "write_queue_drops_total", Type::kCounter,
          "Writes dropped because the tier's queue was full or the tier closed.", kPersistentTiers,
          &TierMetrics::write_queue_drops);
  PerTier(w, m, "write_errors_total", Type::kCounter, "Writes that failed.", kPersistentTiers,
          &TierMetrics::write_errors);

  const std::string refused = "kvstore_prompt_cache_refused_total";
  w.Family(refused, Type::kCounter, "Stored entries the tier refused to serve, by reason.");
  for (PromptCacheTier t : kPersistentTiers) {
    for (RefusalReason r : kReasons) {
      w.Sample(refused, {{"tier", PromptCacheTierName(t)}, {"reason", RefusalReasonName(r)}},
               m.tier(t).refused[static_cast<size_t>(r)]);
    }
  }
  const std::string inserts_refused = "kvstore_prompt_cache_inserts_refused_total";
  w.Family(inserts_refused, Type::kCounter, "Inserts refused before anything was stored, by reason.");
  for (RefusalReason r : {RefusalReason::kFingerprint, RefusalReason::kTokenCount}) {
    w.Sample(inserts_refused, {{"reason", RefusalReasonName(r)}}, m.inserts_refused[static_cast<size_t>(r)]);
  }
  w.Family("kvstore_prompt_cache_unknown_model_fetches_total", Type::kCounter,
           "Memory misses that asked no persistent tier: no fingerprint was known for the model.");
  w.Sample("kvstore_prompt_cache_unknown_model_fetches_total", {}, m.unknown_model_fetches);

  constexpr PromptCacheTier kStored[] = {PromptCacheTier::kMemory, PromptCacheTier::kDisk};
  PerTier(w, m, "entries", Type::kGauge, "Entries the tier holds.", kStored, &TierMetrics::entries);
  PerTier(w, m, "bytes", Type::kGauge, "Bytes the tier holds.", kStored, &TierMetrics::bytes);

  const std::string latency = "kvstore_prompt_cache_fetch_duration_seconds";
  w.Family(latency, Type::kHistogram, "Time of a fetch, by the tier that served it (miss: none).");
  for (size_t i = 0; i < m.fetch_latency.size(); ++i) {
    const std::string_view result = i < kNumPromptCacheTiers ? PromptCacheTierName(kTiers[i]) : "miss";
    const LatencyHistogram& h = m.fetch_latency[i];
    w.Histogram(latency, {{"result", result}}, LatencyHistogram::kBounds, h.counts, h.sum_seconds);
  }
  return w.text();
}

}  // namespace kvstore
