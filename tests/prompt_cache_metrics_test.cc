// The counters ServerPromptCache keeps, rendered in the Prometheus text
// exposition format and checked against the format's rules.
#include "kvstore/prompt_cache_metrics.h"

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "kvstore/kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Iota;
using testing::Tokens;

// One parsed line of the exposition: "name{labels} value".
struct Line {
  std::string name, labels;
  double value = 0;
};

// Checks the text against the format's rules and returns its samples: every
// sample belongs to the family whose # HELP and # TYPE lines precede it
// (histograms: _bucket, _sum, _count), each family once, buckets cumulative
// and ending with +Inf equal to _count.
std::vector<Line> ParseExposition(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? (-?[0-9.eE+-]+|\+Inf|NaN))");
  std::istringstream in(text);
  std::vector<Line> out;
  std::set<std::string> families;
  std::string family, family_type, pending_help;
  std::map<std::string, double> last_bucket;  // series -> cumulative count so far
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      pending_help = m[1];
      EXPECT_TRUE(families.insert(pending_help).second) << "family twice: " << line;
      continue;
    }
    if (std::regex_match(line, m, type)) {
      EXPECT_EQ(m[1], pending_help) << "# TYPE without its # HELP: " << line;
      family = m[1];
      family_type = m[2];
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: " << line;
    Line l{m[1], m[2], std::stod(m[5] == "+Inf" ? std::string("inf") : std::string(m[5]))};
    if (family_type == "histogram") {
      EXPECT_TRUE(l.name == family + "_bucket" || l.name == family + "_sum" || l.name == family + "_count") << line;
      const std::string series = std::regex_replace(l.labels, std::regex(R"(,?le="[^"]*")"), "");
      if (l.name == family + "_bucket") {
        EXPECT_GE(l.value, last_bucket[series]) << "buckets not cumulative: " << line;
        last_bucket[series] = l.value;
      } else if (l.name == family + "_count") {
        EXPECT_EQ(l.value, last_bucket[series]) << "+Inf bucket != _count: " << line;
      }
    } else {
      EXPECT_EQ(l.name, family) << "sample outside its family: " << line;
    }
    out.push_back(std::move(l));
  }
  return out;
}

double Value(const std::vector<Line>& lines, const std::string& name, const std::string& labels = "") {
  for (const Line& l : lines) {
    if (l.name == name && l.labels == labels) return l.value;
  }
  ADD_FAILURE() << "no sample " << name << labels;
  return -1;
}

PromptCache Attention(int64_t tokens, uint64_t seed) {
  auto kv = std::make_shared<KVCache>();
  testing::Prefill(*kv, tokens, tokens, seed);
  return {kv};
}

// Hits and misses per tier, bytes served and written, refusals by reason,
// queue drops and the latency histogram, through every tier.
TEST(PromptCacheMetricsTest, EveryTierCounts) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  auto tier = testing::OpenTier(backend.get(), 16);
  const PromptCache stored = Attention(64, 1);
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  const int64_t stored_bytes = stored[0]->Nbytes().value();
  {
    ServerPromptCache writer({.disk = store.get(), .shared = tier.get()});
    ASSERT_OK(writer.Insert(fp, Iota(64), stored));
    // Refused inserts: a layer holding another token count, another model's cache.
    EXPECT_THAT(writer.Insert(fp, Iota(10), Attention(9, 2)), testing::HasCode(StatusCode::kInvalidArgument, ""));
    auto wide = std::make_shared<KVCache>();
    testing::Prefill(*wide, 3, 3, 2, 4);
    EXPECT_THAT(writer.Insert(fp, Iota(3), {wide}), testing::HasCode(StatusCode::kInvalidArgument, ""));
    writer.Flush();
    const PromptCacheMetrics m = writer.metrics();
    EXPECT_EQ(m.tier(PromptCacheTier::kDisk).writes, 1);
    EXPECT_EQ(m.tier(PromptCacheTier::kDisk).bytes_written, stored_bytes);
    EXPECT_EQ(m.tier(PromptCacheTier::kShared).writes, 4);  // 64 tokens in 16-token chunks
    EXPECT_GT(m.tier(PromptCacheTier::kShared).bytes_written, 0);
    EXPECT_EQ(m.inserts_refused[static_cast<size_t>(RefusalReason::kTokenCount)], 1);
    EXPECT_EQ(m.inserts_refused[static_cast<size_t>(RefusalReason::kFingerprint)], 1);
  }
  ServerPromptCache cache({.disk = store.get(), .shared = tier.get()});
  Tokens query = Iota(64);
  query.push_back(-1);
  ASSERT_OK(cache.Fetch(fp, query));                    // disk
  ASSERT_OK(cache.Fetch(fp, query));                    // memory (kept from the disk hit)
  ASSERT_OK(cache.Fetch(fp, Tokens{5, 6, 7}));          // a miss in every tier asked
  ASSERT_OK(cache.Fetch(PromptScope{"nameless"}, query));  // no fingerprint: memory only
  ServerPromptCache shared_only({.shared = tier.get()});
  ASSERT_OK(shared_only.Fetch(fp, query));              // shared
  ModelSpec other = fp.spec();
  other.layers[0].dtype = DType::kBF16;
  ASSERT_OK(cache.Fetch(*ModelFingerprint::Make(other), query));  // the disk refuses its entry

  PromptCacheMetrics m = cache.metrics();
  m.Add(shared_only.metrics());
  const std::vector<Line> lines = ParseExposition(PrometheusText(m));
  const std::string p = "kvstore_prompt_cache_";
  EXPECT_EQ(Value(lines, p + "fetches_total"), 6);
  EXPECT_EQ(Value(lines, p + "hits_total", R"({tier="memory"})"), 1);
  EXPECT_EQ(Value(lines, p + "hits_total", R"({tier="disk"})"), 1);
  EXPECT_EQ(Value(lines, p + "hits_total", R"({tier="shared"})"), 1);
  EXPECT_EQ(Value(lines, p + "misses_total", R"({tier="memory"})"), 5);
  EXPECT_EQ(Value(lines, p + "misses_total", R"({tier="disk"})"), 2);  // the miss, the other model
  EXPECT_EQ(Value(lines, p + "tokens_served_total", R"({tier="disk"})"), 64);
  EXPECT_GT(Value(lines, p + "bytes_served_total", R"({tier="disk"})"), 0);
  EXPECT_EQ(Value(lines, p + "refused_total", R"({tier="disk",reason="fingerprint"})"), 1);
  EXPECT_EQ(Value(lines, p + "refused_total", R"({tier="shared",reason="forged"})"), 0);
  EXPECT_EQ(Value(lines, p + "unknown_model_fetches_total"), 1);
  EXPECT_EQ(Value(lines, p + "entries", R"({tier="memory"})"), 2);
  EXPECT_EQ(Value(lines, p + "entries", R"({tier="disk"})"), 1);
  EXPECT_EQ(Value(lines, p + "fetch_duration_seconds_count", R"({result="miss"})"), 3);
  EXPECT_EQ(Value(lines, p + "fetch_duration_seconds_count", R"({result="shared"})"), 1);
  const ServerPromptCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.hits[0] + stats.hits[1], 2);
  EXPECT_EQ(stats.misses, 3);
}

// A full disk queue and a closed tier drop writes, counted; after
// ClosePersistentTiers a fetch uses memory only.
TEST(PromptCacheMetricsTest, DroppedWritesAreCounted) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(env.get(), "/store", {}));
  const PromptCache stored = Attention(8, 1);
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  ServerPromptCache cache({.disk = store.get(), .write_queue_capacity = 0});
  ASSERT_OK(cache.Insert(fp, Iota(8), stored));
  cache.Flush();
  EXPECT_EQ(store->entries(), 0);
  EXPECT_EQ(cache.metrics().tier(PromptCacheTier::kDisk).write_queue_drops, 1);

  ServerPromptCache open({.disk = store.get()});
  ASSERT_OK(open.Insert(fp, Iota(8), stored));
  open.ClosePersistentTiers();
  EXPECT_EQ(store->entries(), 1);  // flushed before closing
  ASSERT_OK(open.Insert(fp, Iota(9), Attention(9, 2)));
  open.ClosePersistentTiers();
  EXPECT_EQ(store->entries(), 1);
  const PromptCacheMetrics m = open.metrics();
  EXPECT_EQ(m.tier(PromptCacheTier::kDisk).write_queue_drops, 1);
  EXPECT_EQ(m.tier(PromptCacheTier::kDisk).writes, 1);
  EXPECT_EQ(m.tier(PromptCacheTier::kDisk).entries, 1);  // as the tier last said
  open.TrimTo(0, std::nullopt);
  ASSERT_OK_AND_ASSIGN(auto hit, open.Fetch(fp, Iota(9)));
  EXPECT_FALSE(hit.has_value());  // the disk holds it, but is closed
}

// With synchronous disk writes an insert returns the disk's error; with
// asynchronous ones it is counted.
TEST(PromptCacheMetricsTest, DiskWriteErrors) {
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  ASSERT_OK_AND_ASSIGN(auto store, PromptCacheStore::Open(&env, "/store", {}));
  env.FailAlways(FaultInjectionEnv::Op::kRename);
  const PromptCache stored = Attention(8, 1);
  const ModelFingerprint fp = testing::FingerprintOf(stored, "m");
  ServerPromptCache sync({.disk = store.get(), .async_writes = false});
  EXPECT_THAT(sync.Insert(fp, Iota(8), stored), testing::HasCode(StatusCode::kIOError, "injected fault"));
  ServerPromptCache async({.disk = store.get()});
  ASSERT_OK(async.Insert(fp, Iota(8), stored));
  async.Flush();
  EXPECT_EQ(async.metrics().tier(PromptCacheTier::kDisk).write_errors, 1);
  EXPECT_EQ(async.stats().entries, 1);  // memory has it
}

}  // namespace
}  // namespace kvstore
