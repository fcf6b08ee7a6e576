#include "apps/prompt_cache_sim/report.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <sstream>

namespace sim {
namespace {

using Stats = kvstore::SharedPromptCache::Stats;

long long L(int64_t v) { return static_cast<long long>(v); }

// The shared tier's counters that add up over servers, by name.
constexpr std::pair<const char*, int64_t Stats::*> kTierFields[] = {
    {"fetches", &Stats::fetches},
    {"tier_hits", &Stats::hits},
    {"values_read", &Stats::values_read},
    {"vanished", &Stats::vanished},
    {"corrupt", &Stats::corrupt},
    {"forged", &Stats::forged},
    {"mismatched", &Stats::mismatched},
    {"deleted", &Stats::deleted},
    {"backend_errors", &Stats::backend_errors},
    {"inserts_dropped", &Stats::inserts_dropped},
    {"insert_errors", &Stats::insert_errors},
    {"chunks_written", &Stats::chunks_written},
    {"chunks_present", &Stats::chunks_present},
    {"chunks_incomplete", &Stats::chunks_incomplete},
    {"snapshots_written", &Stats::snapshots_written},
    {"bytes_written", &Stats::bytes_written}};

std::optional<int64_t> Int(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::unique_ptr<kvstore::PromptCacheStore> Report::OpenStore(const std::string& dir, int64_t max_bytes) {
  // No report asked: the store serves at once and indexes its directory meanwhile.
  auto opened = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), dir, {max_bytes});
  if (!opened.ok()) {
    std::fprintf(stderr, "prompt_cache_sim: %s\n", opened.status().ToString().c_str());
    return nullptr;
  }
  return std::move(opened).value();
}

void Report::AddServer(const SimServer& server) {
  counters_.Add(server.counters());
  metrics_.AddServer(server.cache().metrics());
  const auto s = server.cache().stats();
  entries_ += s.entries;
  bytes_ += s.bytes;
}

void Report::AddStore(const kvstore::PromptCacheStore& store) {
  kvstore::Result<kvstore::StoreOpenReport> report = store.WaitUntilIndexed();
  if (report.ok()) {
    std::printf("store: %lld entries recovered (%lld from the manifest, %lld manifest lines ignored), %zu dropped, "
                "%lld temp files removed\n",
                L(report->entries), L(report->from_manifest), L(report->manifest_ignored), report->dropped.size(),
                L(report->temp_files_removed));
    for (const auto& d : report->dropped) std::printf("  dropped %s\n", d.c_str());
  } else {
    std::printf("store: indexing failed: %s\n", report.status().ToString().c_str());
  }
  ++stores_;
  disk_entries_ += store.entries();
  disk_bytes_ += store.bytes();
  disk_corrupt_ += store.corrupt_dropped();
  disk_mismatched_ += store.mismatched_dropped();
}

void Report::AddTier(const Stats& s, const std::string& describe) {
  shared_describe_ = describe;
  if (!shared_) shared_ = Stats{};
  for (const auto& [name, field] : kTierFields) (*shared_).*field += s.*field;
}

// ---- Worker processes ----

void Report::PrintWorker() const {
  std::printf("worker_report");
  for (const auto& [name, field] : kCounterFields) std::printf(" %s=%lld", name, L(counters_.*field));
  std::printf(" entries=%lld bytes=%lld stores=%lld disk_entries=%lld disk_bytes=%lld disk_corrupt=%lld "
              "disk_mismatched=%lld\n",
              L(entries_), L(bytes_), L(stores_), L(disk_entries_), L(disk_bytes_), L(disk_corrupt_),
              L(disk_mismatched_));
  if (shared_) {
    std::printf("worker_shared");
    for (const auto& [name, field] : kTierFields) std::printf(" %s=%lld", name, L((*shared_).*field));
    std::printf(" describe=%s\n", shared_describe_.c_str());
  }
  const std::optional<std::string> metrics = metrics_.Text();
  std::istringstream lines(metrics.value_or(""));
  for (std::string line; std::getline(lines, line);) std::printf("worker_metrics %s\n", line.c_str());
  std::printf("worker_latency_us");
  for (double us : counters_.latency_us) std::printf(" %.1f", us);
  std::printf("\n");
}

bool Report::AddWorkerOutput(std::string_view output) {
  bool reported = false;
  std::string exposition;
  std::istringstream lines{std::string(output)};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string kind, word;
    words >> kind;
    if (kind == "worker_metrics") {
      exposition += line.substr(kind.size() + 1) + "\n";
      continue;
    }
    if (kind == "worker_latency_us") {
      double us;
      while (words >> us) counters_.latency_us.push_back(us);
      continue;
    }
    if (kind != "worker_report" && kind != "worker_shared") continue;
    Counters c;
    Stats s;
    int64_t* own[] = {&entries_, &bytes_, &stores_, &disk_entries_, &disk_bytes_, &disk_corrupt_, &disk_mismatched_};
    const char* own_names[] = {"entries", "bytes", "stores", "disk_entries", "disk_bytes", "disk_corrupt",
                               "disk_mismatched"};
    while (words >> word) {
      const size_t eq = word.find('=');
      const std::string name = word.substr(0, eq);
      if (name == "describe") {
        std::string rest;
        std::getline(words, rest);
        shared_describe_ = word.substr(eq + 1) + rest;
        break;
      }
      const std::optional<int64_t> v = eq == std::string::npos ? std::nullopt : Int(word.substr(eq + 1));
      if (!v) continue;
      for (const auto& [n, field] : kCounterFields) if (name == n) c.*field = *v;
      for (const auto& [n, field] : kTierFields) if (name == n) s.*field = *v;
      for (size_t i = 0; i < std::size(own); ++i) if (name == own_names[i]) *own[i] += *v;
    }
    if (kind == "worker_report") {
      counters_.Add(c);
      reported = true;
    } else {
      AddTier(s, shared_describe_);
    }
  }
  if (!exposition.empty()) metrics_.AddWorkerText(std::move(exposition));
  return reported;
}

std::string Report::SimSamples() const {
  return "# HELP prompt_cache_sim_cross_tenant_hits Reused caches holding rows another tenant wrote (must be 0).\n"
         "# TYPE prompt_cache_sim_cross_tenant_hits gauge\n"
         "prompt_cache_sim_cross_tenant_hits " +
         std::to_string(counters_.cross_tenant_hits) + "\n";
}

int Report::Print(int threads, int processes) {
  Counters& c = counters_;
  std::sort(c.latency_us.begin(), c.latency_us.end());
  auto pct = [&](double p) {
    return c.latency_us.empty() ? 0.0 : c.latency_us[static_cast<size_t>(p * (c.latency_us.size() - 1))];
  };
  std::printf("requests: %lld (threads %d, processes %d)\n", L(c.requests), threads, processes);
  if (lost_ > 0) std::printf("processes_lost: %lld\n", L(lost_));
  // Requests are counted here; shared_hits below counts tokens.
  std::printf("hits: %lld requests (disk %lld, shared tier %lld)\n", L(c.hits), L(c.disk_hits),
              L(c.shared_tier_hits));
  std::printf("tokens_reused: %lld of %lld\n", L(c.reused), L(c.tokens));
  std::printf("memory: %lld entries, %lld bytes\n", L(entries_), L(bytes_));
  if (stores_ > 0) {
    std::printf("disk: %lld entries, %lld bytes, %lld corrupt dropped, %lld mismatched dropped\n", L(disk_entries_),
                L(disk_bytes_), L(disk_corrupt_), L(disk_mismatched_));
  }
  if (shared_) {
    const Stats& s = *shared_;
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
    std::printf("shared_hits: %lld tokens (reused from chunks another server wrote)\n", L(c.shared_hits));
    std::printf("dedup: %.3f\n", c.whole_file_bytes ? static_cast<double>(shared_->bytes_written) / c.whole_file_bytes
                                                      : 0.0);
  }
  std::printf("mismatches: %lld\n", L(c.mismatches));
  std::printf("corrupt_served: %lld\n", L(c.corrupt_served));
  std::printf("cross_tenant_hits: %lld\n", L(c.cross_tenant_hits));
  return c.mismatches == 0 && c.corrupt_served == 0 && c.errors == 0 && c.cross_tenant_hits == 0 ? 0 : 1;
}

}  // namespace sim
