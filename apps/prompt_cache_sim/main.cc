// prompt_cache_sim: simulates inference servers' prompt-cache traffic and
// checks every reused cache bit-exactly.
//
// P server processes (--processes), each with its own memory tier and T
// request threads, serve R requests in all: shared system prompts followed
// by a path through branching conversations and a new message
// (workload.h). With --store DIR each server has a disk tier (DIR itself
// for one server, DIR/server-<i> for several); a run on a directory left by
// a killed run recovers it. Servers share a tier of chunks (--chunk-tokens):
// with --redis URL, in Redis, each server a process of its own (this
// program again, --worker I); without it and with several servers, an
// in-memory store inside this one process.
//
// Ends with "hit_rate: X%", "shared_hits: N tokens" (tokens reused from chunks
// another server wrote), "dedup: X" (bytes the shared tier stored / tensor
// bytes of the same inserts as whole files), "mismatches: N" and
// "corrupt_served: N" and "cross_tenant_hits: N" (--tenants: hits whose rows
// another tenant wrote; each tenant's K/V differ, so they are told apart by
// their bytes); exits non-zero on any mismatch, cross-tenant hit or error. With
// --metrics FILE, the servers' counters, summed, are written to FILE in the
// Prometheus text format once the run ends.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <unistd.h>

#include "apps/common/secret.h"
#include "apps/prompt_cache_sim/processes.h"
#include "apps/prompt_cache_sim/report.h"
#include "apps/prompt_cache_sim/server.h"
#include "kvstore/kv_backend.h"
#include "kvstore/redis_backend.h"
#include "kvstore/shared_prompt_cache.h"
#include "kvstore/shared_tier_admin.h"

namespace {

struct Options {
  int threads = 2, processes = 1;
  int64_t requests = 200;
  double seconds = 0;
  uint64_t seed = 1;
  std::string store_dir;
  int64_t mem_bytes = int64_t{64} << 20, disk_bytes = int64_t{256} << 20, max_entries = 256;
  int64_t chunk_tokens = 16;
  std::string redis_url, key_prefix = "kvstore:";
  int worker = -1;  // >= 0: one server process of a --redis run
  size_t insert_queue = 256;
  std::string secret, secret_file;
  std::string metrics_file;
  bool unsalted_tenants = false;  // tests: tenants without salts, to show the check catches sharing
  sim::WorkloadOptions workload;
};

// Tenant k's salt: the same in every server process of a run, never printed.
std::vector<kvstore::TenantSalt> TenantSalts(const Options& o) {
  std::vector<kvstore::TenantSalt> salts;
  if (o.unsalted_tenants) return salts;
  for (int k = 0; k < o.workload.tenants; ++k) {
    salts.push_back(kvstore::TenantSalt::Make("prompt_cache_sim tenant " + std::to_string(k) + " seed " +
                                              std::to_string(o.seed))
                        .value());
  }
  return salts;
}

void AddOptions(CLI::App& app, Options& o) {
  app.add_option("--threads", o.threads, "request threads per server");
  app.add_option("--requests", o.requests, "total requests");
  app.add_option("--seconds", o.seconds, "stop taking requests after this long (0: never)");
  app.add_option("--seed", o.seed, "random seed");
  app.add_option("--store", o.store_dir, "disk tier directory (optional)");
  app.add_option("--memory-bytes", o.mem_bytes, "in-memory byte budget per server");
  app.add_option("--disk-bytes", o.disk_bytes, "disk byte budget per server");
  app.add_option("--max-entries", o.max_entries, "in-memory entry budget per server");
  app.add_option("--processes", o.processes, "servers sharing the shared tier, each with its own memory tier")
      ->check(CLI::Range(1, 64));
  app.add_option("--chunk-tokens", o.chunk_tokens, "tokens per shared-tier chunk")->check(CLI::PositiveNumber);
  app.add_option("--secret", o.secret,
                 "shared-tier HMAC secret (visible to other users in ps: prefer --secret-file or "
                 "$KVSTORE_SHARED_SECRET)");
  app.add_option("--secret-file", o.secret_file,
                 "shared-tier HMAC secret from this file (one trailing newline dropped)");
  app.add_option("--redis", o.redis_url,
                 "redis://[USER:PASSWORD@]HOST:PORT (any node of a cluster): the shared tier, and --processes "
                 "real server processes");
  app.add_option("--key-prefix", o.key_prefix, "shared-tier key prefix");
  app.add_option("--worker", o.worker, "internal: run server I of a --redis run")->group("");
  app.add_option("--insert-queue", o.insert_queue, "shared-tier inserts queued per server");
  app.add_option("--metrics", o.metrics_file,
                 "write every server's counters, summed, to this file in the Prometheus text format at the end");
  sim::WorkloadOptions& w = o.workload;
  app.add_option("--systems", w.systems, "shared system prompts")->check(CLI::PositiveNumber);
  app.add_option("--system-tokens", w.system_tokens, "tokens per system prompt")->check(CLI::PositiveNumber);
  app.add_option("--conversations", w.conversations, "conversations")->check(CLI::PositiveNumber);
  app.add_option("--turns", w.turns, "turns per conversation path");
  app.add_option("--branches", w.branches, "alternatives per turn")->check(CLI::PositiveNumber);
  app.add_option("--turn-tokens", w.turn_tokens, "tokens per turn")->check(CLI::PositiveNumber);
  app.add_option("--tail-tokens", w.tail_tokens, "new-message tokens, at most");
  app.add_option("--layers", w.layers, "layers")->check(CLI::PositiveNumber);
  app.add_option("--heads", w.heads, "KV heads")->check(CLI::PositiveNumber);
  app.add_option("--dim", w.dim, "head dim")->check(CLI::PositiveNumber);
  app.add_option("--tenants", w.tenants,
                 "tenants: each conversation gets one of N tenant salts; reports cross_tenant_hits")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--unsalted-tenants", o.unsalted_tenants, "internal: tenants without salts")->group("");
}

// Prints "prompt_cache_sim: <status>" on stderr with the credentials of any
// URL in it redacted; returns the exit code 2.
int PrintError(const kvstore::Status& status) {
  std::fprintf(stderr, "prompt_cache_sim: %s\n", kvstore::RedactCredentials(status.ToString()).c_str());
  return 2;
}

// Runs servers [first, first + count) of o.processes in this process,
// sharing `backend` (none: no shared tier), and adds them to `report`.
// False when a tier cannot be opened.
bool RunServers(const Options& o, kvstore::KvBackend* backend, int first, int count, sim::Report& report) {
  const sim::Workload workload(o.workload);
  const kvstore::ModelFingerprint model =
      kvstore::ModelFingerprint::Of("sim-model", workload.Prefill({1})).value();
  std::vector<std::unique_ptr<kvstore::PromptCacheStore>> stores;
  std::vector<std::unique_ptr<kvstore::SharedPromptCache>> tiers;
  std::vector<std::unique_ptr<sim::SimServer>> servers;
  for (int i = first; i < first + count; ++i) {
    sim::ServerOptions s{.threads = o.threads,
                         .requests = o.requests / o.processes + (i < o.requests % o.processes ? 1 : 0),
                         .seconds = o.seconds,
                         .seed = o.seed + static_cast<uint64_t>(i) * 7919,
                         .cache = {.max_entries = o.max_entries, .max_bytes = o.mem_bytes},
                         .salts = TenantSalts(o)};
    if (!o.store_dir.empty()) {
      const std::string dir = o.processes == 1 ? o.store_dir : o.store_dir + "/server-" + std::to_string(i);
      auto store = report.OpenStore(dir, o.disk_bytes);
      if (!store) return false;
      s.cache.disk = store.get();
      stores.push_back(std::move(store));
    }
    if (backend != nullptr) {
      auto tier = kvstore::SharedPromptCache::Open({.backend = backend,
                                                    .key_prefix = o.key_prefix,
                                                    .chunk_tokens = o.chunk_tokens,
                                                    .secret = o.secret.empty()
                                                                  ? std::nullopt
                                                                  : std::optional<std::string>(o.secret),
                                                    .writer_id = "server-" + std::to_string(i) + "@" +
                                                                 std::to_string(getpid()),
                                                    .insert_queue_capacity = o.insert_queue});
      if (!tier.ok()) {
        PrintError(tier.status());
        return false;
      }
      s.cache.shared = tier->get();
      tiers.push_back(std::move(tier).value());
    }
    servers.push_back(std::make_unique<sim::SimServer>(workload, model, s));
  }
  std::vector<std::thread> running;
  for (auto& server : servers) running.emplace_back([&server] { server->Run(); });
  for (auto& t : running) t.join();
  for (auto& tier : tiers) tier->Flush();
  for (const auto& server : servers) report.AddServer(*server);
  for (const auto& store : stores) report.AddStore(*store);
  for (const auto& tier : tiers) report.AddTier(tier->stats(), tier->Describe());
  return true;
}

// A worker's connection. The parent has already checked the URL and the
// login, so an IOError here is the server not answering within the
// timeouts (a loaded machine: 4 workers connecting at once while the
// compilers run): tried again, 5 times over about a second, before the
// worker gives up.
kvstore::Result<std::unique_ptr<kvstore::KvBackend>> OpenWorkerBackend(const std::string& url) {
  kvstore::Result<std::unique_ptr<kvstore::KvBackend>> backend = kvstore::OpenRedisBackend({.url = url});
  for (int retry = 1; retry < 5 && !backend.ok() && backend.status().code() == kvstore::StatusCode::kIOError;
       ++retry) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * retry));
    backend = kvstore::OpenRedisBackend({.url = url});
  }
  return backend;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prompt_cache_sim: concurrent prompt-cache traffic with bit-exact checks"};
  Options o;
  AddOptions(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // A misplaced URL is quoted by the parser: redact it.
    std::fprintf(stderr, "prompt_cache_sim: %s\n", kvstore::RedactCredentials(e.what()).c_str());
    return 1;
  }
  o.workload.seed = o.seed;
  // Workers get the same flags (or the same environment), so resolve here too.
  kvstore::Result<std::string> secret = kvapps::ResolveSharedSecret(o.secret, o.secret_file);
  if (!secret.ok()) return PrintError(secret.status());
  o.secret = *secret;
  sim::Report report;
  // The summary, then the metrics file: a run that cannot write it fails.
  auto finish = [&] {
    const int status = report.Print(o.threads, o.processes);
    if (!o.metrics_file.empty() && !report.metrics().Write(o.metrics_file, report.SimSamples())) return 2;
    return status;
  };
  if (o.redis_url.empty()) {
    // Several servers in this one process share an in-memory chunk store.
    std::unique_ptr<kvstore::KvBackend> backend;
    if (o.processes > 1) backend = kvstore::NewMemKvBackend();
    if (!RunServers(o, backend.get(), 0, o.processes, report)) return 2;
    return finish();
  }
  if (o.worker < 0) {
    // The parent checks the URL and the login once, before any worker
    // starts, so a mistake is reported once and at once.
    if (auto probe = kvstore::OpenRedisBackend({.url = o.redis_url}); !probe.ok()) return PrintError(probe.status());
    // One worker process per server.
    if (!sim::RunWorkerProcesses(std::vector<std::string>(argv, argv + argc), o.processes, report)) return 2;
    return finish();
  }
  auto backend = OpenWorkerBackend(o.redis_url);
  if (!backend.ok()) return PrintError(backend.status());
  if (!RunServers(o, backend->get(), o.worker, 1, report)) return 2;
  report.PrintWorker();
  return 0;
}
