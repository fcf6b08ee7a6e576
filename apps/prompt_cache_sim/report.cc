#include "apps/prompt_cache_sim/report.h"

#include <algorithm>
#include <cstdio>

namespace sim {
namespace {

long long L(int64_t v) { return static_cast<long long>(v); }

}  // namespace

std::unique_ptr<kvstore::PromptCacheStore> Report::OpenStore(const std::string& dir, int64_t max_bytes) {
  kvstore::StoreOpenReport report;
  auto opened = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), dir, {max_bytes}, &report);
  if (!opened.ok()) {
    std::fprintf(stderr, "prompt_cache_sim: %s\n", opened.status().ToString().c_str());
    return nullptr;
  }
  std::printf("store: %lld entries recovered (%lld from the manifest, %lld manifest lines ignored), %zu dropped\n",
              L(report.entries), L(report.from_manifest), L(report.manifest_ignored), report.dropped.size());
  for (const auto& d : report.dropped) std::printf("  dropped %s\n", d.c_str());
  return std::move(opened).value();
}

void Report::AddServer(const SimServer& server) {
  counters_.Add(server.counters());
  const auto s = server.cache().stats();
  entries_ += s.entries;
  bytes_ += s.bytes;
}

void Report::AddStore(const kvstore::PromptCacheStore& store) {
  ++stores_;
  disk_entries_ += store.entries();
  disk_bytes_ += store.bytes();
  disk_corrupt_ += store.corrupt_dropped();
  disk_mismatched_ += store.mismatched_dropped();
}

void Report::AddTier(const kvstore::SharedPromptCache& tier) {
  const kvstore::SharedPromptCache::Stats s = tier.stats();
  shared_describe_ = tier.Describe();
  if (!shared_) {
    shared_ = s;
    return;
  }
  kvstore::SharedPromptCache::Stats& t = *shared_;
  for (auto field : {&kvstore::SharedPromptCache::Stats::fetches, &kvstore::SharedPromptCache::Stats::hits,
                     &kvstore::SharedPromptCache::Stats::values_read, &kvstore::SharedPromptCache::Stats::vanished,
                     &kvstore::SharedPromptCache::Stats::corrupt, &kvstore::SharedPromptCache::Stats::forged,
                     &kvstore::SharedPromptCache::Stats::mismatched, &kvstore::SharedPromptCache::Stats::deleted,
                     &kvstore::SharedPromptCache::Stats::backend_errors,
                     &kvstore::SharedPromptCache::Stats::inserts_dropped,
                     &kvstore::SharedPromptCache::Stats::insert_errors,
                     &kvstore::SharedPromptCache::Stats::chunks_written,
                     &kvstore::SharedPromptCache::Stats::chunks_present,
                     &kvstore::SharedPromptCache::Stats::bytes_written}) {
    t.*field += s.*field;
  }
}

int Report::Print(int threads, int processes) {
  Counters& c = counters_;
  std::sort(c.latency_us.begin(), c.latency_us.end());
  auto pct = [&](double p) {
    return c.latency_us.empty() ? 0.0 : c.latency_us[static_cast<size_t>(p * (c.latency_us.size() - 1))];
  };
  std::printf("requests: %lld (threads %d, processes %d)\n", L(c.requests), threads, processes);
  std::printf("hits: %lld (disk %lld, shared %lld)\n", L(c.hits), L(c.disk_hits), L(c.shared_tier_hits));
  std::printf("tokens_reused: %lld of %lld\n", L(c.reused), L(c.tokens));
  std::printf("memory: %lld entries, %lld bytes\n", L(entries_), L(bytes_));
  if (stores_ > 0) {
    std::printf("disk: %lld entries, %lld bytes, %lld corrupt dropped, %lld mismatched dropped\n", L(disk_entries_),
                L(disk_bytes_), L(disk_corrupt_), L(disk_mismatched_));
  }
  if (shared_) {
    const auto& s = *shared_;
    std::printf("shared: %s; %lld chunks written (%lld bytes), %lld already there; %lld values read, %lld vanished, "
                "%lld corrupt, %lld forged, %lld mismatched, %lld deleted; %lld backend errors; %lld inserts dropped, "
                "%lld failed\n",
                shared_describe_.c_str(), L(s.chunks_written), L(s.bytes_written), L(s.chunks_present),
                L(s.values_read), L(s.vanished), L(s.corrupt), L(s.forged), L(s.mismatched), L(s.deleted),
                L(s.backend_errors), L(s.inserts_dropped), L(s.insert_errors));
  }
  std::printf("fetch_latency_us: p50 %.1f p99 %.1f\n", pct(0.5), pct(0.99));
  std::printf("errors: %lld\n", L(c.errors));
  std::printf("hit_rate: %.1f%%\n", c.requests ? 100.0 * c.hits / c.requests : 0.0);
  if (shared_) {
    std::printf("shared_hits: %lld\n", L(c.shared_hits));
    std::printf("dedup: %.3f\n", c.whole_file_bytes ? static_cast<double>(shared_->bytes_written) / c.whole_file_bytes
                                                      : 0.0);
  }
  std::printf("mismatches: %lld\n", L(c.mismatches));
  std::printf("corrupt_served: %lld\n", L(c.corrupt_served));
  return c.mismatches == 0 && c.corrupt_served == 0 && c.errors == 0 ? 0 : 1;
}

}  // namespace sim
