// The shared tier on real Redis servers: sharing between server processes'
// tiers on a single node and across a cluster's masters, an ACL user
// limited to the tier's prefix, corruption behind the tier's back, eviction
// under maxmemory, a stopped or killed server (a miss within the timeout),
// and a dump of a sealed tier that shows no token id and no K/V byte.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kvstore/kv_cache.h"
#include "kvstore/redis_backend.h"
#include "kvstore/server_prompt_cache.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "redis_test_util.h"
#include "shared_tier_testutil.h"

namespace kvstore::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int64_t kC = 16;

PromptCache Layers(int64_t tokens, uint64_t seed) {
  PromptCache cache = {std::make_shared<KVCache>(), std::make_shared<KVCache>()};
  for (size_t l = 0; l < cache.size(); ++l) Prefill(*cache[l], tokens, 7, seed * 10 + l, 2, 32);
  return cache;
}

std::unique_ptr<KvBackend> Open(const std::string& url, milliseconds timeout = milliseconds(2000)) {
  Result<std::unique_ptr<KvBackend>> backend = OpenRedisBackend({.url = url, .command_timeout = timeout});
  EXPECT_OK(backend);
  return backend.ok() ? std::move(backend).value() : nullptr;
}

std::unique_ptr<SharedPromptCache> TierOn(KvBackend* backend, const std::string& prefix, const std::string& writer) {
  return SharedPromptCache::Open({.backend = backend, .key_prefix = prefix, .chunk_tokens = kC, .secret = "s",
                                  .writer_id = writer, .async_insert = false})
      .value();
}

// Every key under `prefix` and its value, as someone who can read the Redis sees them.
std::vector<std::string> DumpValues(const std::string& url, KvBackend& backend, const std::string& prefix) {
  auto admin = RedisAdmin::Connect(url);
  EXPECT_OK(admin);
  std::vector<std::string> keys;
  for (const RedisReply& key : (*admin)->Must({"KEYS", prefix + "*"}).elements) keys.push_back(key.str);
  std::vector<std::string> out;
  auto values = backend.Get(keys);
  EXPECT_OK(values);
  for (const auto& v : *values) out.push_back(v.value_or(""));
  return out;
}

// How many of the needles occur in any of the values.
int Found(const std::vector<std::string>& values, const std::vector<std::string>& needles) {
  int found = 0;
  for (const std::string& needle : needles) {
    found += std::any_of(values.begin(), values.end(),
                         [&](const std::string& v) { return v.find(needle) != std::string::npos; });
  }
  return found;
}

// Without the secret a dump of Redis reveals no token id (as the decimal
// text a header holds, or as little-endian int32 pairs) and no K/V byte
// (any 16-byte piece of a tensor). The same search over an unsealed tier
// finds them all, so it is a search that would see them.
TEST(SharedTierRedis, ADumpOfASealedTierRevealsNoTokenAndNoKvByte) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  auto backend = Open(url);
  ASSERT_NE(backend, nullptr);
  const Tokens tokens = Iota(4 * kC, 7000001);
  const PromptCache cache = Layers(4 * kC, 9);
  const ModelFingerprint fp = FingerprintOf(cache);
  std::vector<std::string> ids, pairs, kv;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ids.push_back(std::to_string(tokens[i]));
    if (i + 1 < tokens.size()) {
      std::string pair(8, '\0');
      std::memcpy(pair.data(), &tokens[i], 8);  // little-endian hosts
      pairs.push_back(pair);
    }
  }
  for (const auto& layer : cache) {
    const CacheState state = layer->State().value();  // KVCache: [keys, values]
    for (size_t i = 0; i < state.size(); ++i) {
      state[i].array().ForEachRun([&](std::span<const std::byte> run) {
        for (size_t at = 0; at + 16 <= run.size(); at += 16) {
          kv.emplace_back(reinterpret_cast<const char*>(run.data() + at), 16);
        }
      });
    }
  }
  for (const bool sealed : {true, false}) {
    SCOPED_TRACE(sealed ? "sealed" : "unsealed");
    const std::string prefix = UniqueKeyPrefix() + (sealed ? "sealed:" : "plain:");
    ASSERT_OK_AND_ASSIGN(auto tier, SharedPromptCache::Open({.backend = backend.get(), .key_prefix = prefix,
                                                             .chunk_tokens = kC,
                                                             .secret = sealed ? std::optional<std::string>("s")
                                                                              : std::nullopt,
                                                             .async_insert = false}));
    ASSERT_OK(tier->Insert(fp, tokens, cache));
    const std::vector<std::string> values = DumpValues(url, *backend, prefix);
    EXPECT_EQ(values.size(), 4u + 2u);  // chunks, the descriptor and the model record
    EXPECT_EQ(Found(values, ids), sealed ? 0 : static_cast<int>(ids.size()));
    EXPECT_EQ(Found(values, pairs), 0);  // a plain header holds token ids as text
    EXPECT_EQ(Found(values, kv), sealed ? 0 : static_cast<int>(kv.size()));
  }
}

// Two server processes' tiers (own connections) share a prompt's chunks.
void ExpectSharing(const std::string& url) {
  const std::string prefix = UniqueKeyPrefix();
  auto backend_a = Open(url), backend_b = Open(url);
  ASSERT_NE(backend_a, nullptr);
  auto a = TierOn(backend_a.get(), prefix, "a"), b = TierOn(backend_b.get(), prefix, "b");
  const Tokens tokens = Iota(8 * kC + 3);
  const PromptCache cache = Layers(8 * kC + 3, 1);
  const ModelFingerprint fp = FingerprintOf(cache);
  ASSERT_OK(a->Insert(fp, tokens, cache));
  EXPECT_EQ(a->stats().chunks_written, 8);
  ASSERT_OK_AND_ASSIGN(auto hit, b->Fetch(fp, tokens));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 8 * kC);
  EXPECT_EQ(hit->foreign_tokens, 8 * kC);
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(cache, 8 * kC)));
  ASSERT_OK(b->Insert(fp, tokens, cache));
  EXPECT_EQ(b->stats().chunks_present, 8);
  EXPECT_EQ(b->stats().chunks_written, 0);
}

TEST(SharedTierRedis, ServersShareChunksOnASingleNode) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  ExpectSharing(url);
}

TEST(SharedTierRedis, ServersShareChunksSpreadOverTheClusterMasters) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_CLUSTER_URL");
  KVSTORE_REDIS_SETTING_OR_SKIP(ports, "KVSTORE_TEST_REDIS_CLUSTER_PORTS");
  ExpectSharing(url);
  // A fresh prompt's chunks land on every master.
  const std::string prefix = UniqueKeyPrefix();
  auto backend = Open(url);
  auto tier = TierOn(backend.get(), prefix, "a");
  const PromptCache cache = Layers(32 * kC, 2);
  ASSERT_OK(tier->Insert(FingerprintOf(cache), Iota(32 * kC, 5000), cache));
  const RedisUrl u = ParseRedisUrl(url).value();
  int masters_holding = 0;
  for (size_t at = 0; at <= ports.size();) {
    const size_t comma = std::min(ports.find(',', at), ports.size());
    std::string node = "redis://" + u.user + ":" + u.password + "@" + u.host + ":" + ports.substr(at, comma - at);
    auto admin = RedisAdmin::Connect(node);
    ASSERT_OK(admin);
    RedisReply keys = (*admin)->Must({"KEYS", prefix + "v2/*/c/*"});
    masters_holding += keys.elements.size() > 0;
    at = comma + 1;
  }
  EXPECT_EQ(masters_holding, 3);
}

// A user that may touch only the tier's prefix works there and nowhere else.
TEST(SharedTierRedis, AnAclUserIsLimitedToItsPrefix) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  const std::string prefix = UniqueKeyPrefix();
  const std::string user = "kvtier-" + std::to_string(getpid());
  auto admin = RedisAdmin::Connect(url);
  ASSERT_OK(admin);
  (*admin)->Must({"ACL", "SETUSER", user, "reset", "on", ">tier-pw", "~" + prefix + "*", "-@all", "+get",
                  "+getrange", "+exists", "+set", "+unlink", "+scan", "+multi", "+exec", "+asking", "+eval", "+strlen",
                  "+cluster|slots"});
  const RedisUrl u = ParseRedisUrl(url).value();
  auto backend = Open("redis://" + user + ":tier-pw@" + u.host + ":" + std::to_string(u.port));
  ASSERT_NE(backend, nullptr);
  const PromptCache cache = Layers(3 * kC, 3);
  const ModelFingerprint fp = FingerprintOf(cache);
  auto mine = TierOn(backend.get(), prefix, "a");
  ASSERT_OK(mine->Insert(fp, Iota(3 * kC), cache));
  ASSERT_OK_AND_ASSIGN(auto hit, mine->Fetch(fp, Iota(3 * kC)));
  EXPECT_TRUE(hit.has_value());
  auto theirs = TierOn(backend.get(), "kvtier-other:", "a");
  EXPECT_THAT(theirs->Insert(fp, Iota(3 * kC), cache), HasCode(StatusCode::kPermissionDenied, "NOPERM"));
  ASSERT_OK_AND_ASSIGN(auto miss, theirs->Fetch(fp, Iota(3 * kC)));
  EXPECT_FALSE(miss.has_value());
  EXPECT_GE(theirs->stats().backend_errors, 2);
  (*admin)->Must({"ACL", "DELUSER", user});
}

// SETRANGE over a stored chunk: refused, deleted, the prefix ends before it.
TEST(SharedTierRedis, ACorruptedValueIsRefusedAndDeleted) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  const std::string prefix = UniqueKeyPrefix();
  auto backend = Open(url);
  auto tier = TierOn(backend.get(), prefix, "a");
  const PromptCache cache = Layers(6 * kC, 4);
  const ModelFingerprint fp = FingerprintOf(cache);
  const Tokens tokens = Iota(6 * kC);
  ASSERT_OK(tier->Insert(fp, tokens, cache));
  const ChunkNamespace ns = MakeChunkNamespace(fp, kC, {"s", prefix});
  const std::string victim = ChunkKey(prefix, ns, ChunkKind::kRows, ChainHashes(ns, tokens, 4)[3]);
  auto admin = RedisAdmin::Connect(url);
  ASSERT_OK(admin);
  (*admin)->Must({"SETRANGE", victim, "3000", "behind your back"});
  ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp, tokens));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 3 * kC);
  EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(cache, 3 * kC)));
  EXPECT_EQ(tier->stats().corrupt + tier->stats().forged, 1);
  ASSERT_OK_AND_ASSIGN(auto gone, backend->Exists(std::vector<std::string>{victim}));
  EXPECT_FALSE(gone[0]);
}

// A LIST where a chunk should be: a counted miss (not a backend error on
// every request), deleted, so that the next insert puts the chunk back.
TEST(SharedTierRedis, AKeyOfAnotherTypeIsACountedMissAndDeleted) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  const std::string prefix = UniqueKeyPrefix();
  auto backend = Open(url);
  auto tier = TierOn(backend.get(), prefix, "a");
  const PromptCache cache = Layers(6 * kC, 6);
  const ModelFingerprint fp = FingerprintOf(cache);
  const Tokens tokens = Iota(6 * kC);
  ASSERT_OK(tier->Insert(fp, tokens, cache));
  const ChunkNamespace ns = MakeChunkNamespace(fp, kC, {"s", prefix});
  const std::string key = ChunkKey(prefix, ns, ChunkKind::kRows, ChainHashes(ns, tokens, 4)[3]);
  ASSERT_OK(backend->Delete(std::vector<std::string>{key}));
  MustPutList(url, key);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(fp, tokens));
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tokens, round == 0 ? 3 * kC : 6 * kC);
    EXPECT_EQ(tier->stats().corrupt, 1);
    EXPECT_EQ(tier->stats().deleted, 1);
    EXPECT_EQ(tier->stats().backend_errors, 0);
    ASSERT_OK(tier->Insert(fp, tokens, cache));  // puts chunk 3 back
  }
  EXPECT_EQ(tier->stats().chunks_written, 7);
}

// maxmemory far below the inserts: chunks are evicted, every fetch is a
// miss or a correct prefix.
TEST(SharedTierRedis, EvictionEndsPrefixesButNeverServesWrongKv) {
  KVSTORE_REDIS_SETTING_OR_SKIP(binary, "KVSTORE_TEST_REDIS_SERVER");
  RedisServerProcess server({"--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"});
  ASSERT_TRUE(server.Start());
  auto backend = Open(server.url());
  auto tier = TierOn(backend.get(), "kvstore:", "a");
  std::vector<std::pair<Tokens, PromptCache>> prompts;
  for (int p = 0; p < 24; ++p) {
    prompts.emplace_back(Iota(8 * kC, 10000 * (p + 1)), Layers(8 * kC, static_cast<uint64_t>(p)));
    ASSERT_OK(tier->Insert(FingerprintOf(prompts.back().second), prompts.back().first, prompts.back().second));
  }
  int served = 0, partial = 0;
  for (const auto& [tokens, cache] : prompts) {
    ASSERT_OK_AND_ASSIGN(auto hit, tier->Fetch(FingerprintOf(cache), tokens));
    if (!hit) continue;
    ++served;
    partial += hit->tokens < 8 * kC;
    EXPECT_EQ(Describe(hit->cache), Describe(TrimmedTo(cache, hit->tokens)));
  }
  EXPECT_LT(served, 24);  // 24 x 8 chunks of 16 KiB do not fit in 2 MiB
  EXPECT_GT(served, 0);
  EXPECT_EQ(tier->stats().corrupt + tier->stats().forged + tier->stats().mismatched, 0);
  RecordProperty("partial_prefixes", partial);
}

// A stopped server turns a fetch into a miss within the timeout; a killed
// one too; once it is back (empty) the tier works again.
TEST(SharedTierRedis, ADeadOrStoppedServerIsAMissWithinTheTimeout) {
  KVSTORE_REDIS_SETTING_OR_SKIP(binary, "KVSTORE_TEST_REDIS_SERVER");
  RedisServerProcess server;
  ASSERT_TRUE(server.Start());
  auto backend = Open(server.url(), milliseconds(200));
  auto tier = TierOn(backend.get(), "kvstore:", "a");
  const PromptCache cache = Layers(4 * kC, 5);
  const ModelFingerprint fp = FingerprintOf(cache);
  ASSERT_OK(tier->Insert(fp, Iota(4 * kC), cache));
  server.Pause();
  auto start = Clock::now();
  ASSERT_OK_AND_ASSIGN(auto stopped, tier->Fetch(fp, Iota(4 * kC)));
  EXPECT_FALSE(stopped.has_value());
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  server.Resume();
  server.Kill();
  ASSERT_OK_AND_ASSIGN(auto dead, tier->Fetch(fp, Iota(4 * kC)));
  EXPECT_FALSE(dead.has_value());
  EXPECT_GE(tier->stats().backend_errors, 2);
  ASSERT_TRUE(server.Start());
  std::this_thread::sleep_for(milliseconds(2100));  // the backend's backoff window
  ASSERT_OK(tier->Insert(fp, Iota(4 * kC), cache));
  ASSERT_OK_AND_ASSIGN(auto back, tier->Fetch(fp, Iota(4 * kC)));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->tokens, 4 * kC);
}

// ServerPromptCache::Open opens its shared tier by URL and owns it: two
// servers so opened share a prefix, and the second learns the model's
// structure from the first's record (ModelRegistry), knowing only its id.
TEST(SharedTierRedis, CachesOpenedByUrlShareAPrefixAndTheModel) {
  KVSTORE_REDIS_SETTING_OR_SKIP(url, "KVSTORE_TEST_REDIS_URL");
  ServerPromptCacheOptions options;
  options.redis.url = url;
  options.redis.command_timeout = std::chrono::milliseconds(2000);
  options.shared_options = {.key_prefix = UniqueKeyPrefix(), .chunk_tokens = kC, .secret = "fleet secret"};
  const Tokens tokens = Iota(2 * kC, 500);
  const PromptCache cache = Layers(2 * kC, 3);
  {
    options.shared_options.writer_id = "first";  // as another process would be
    ASSERT_OK_AND_ASSIGN(auto first, ServerPromptCache::Open(options));
    ASSERT_NE(first->shared(), nullptr);
    ASSERT_OK_AND_ASSIGN(ModelFingerprint fp, first->models().Learn("model-y", cache));
    ASSERT_OK(first->Insert(fp, tokens, cache));
  }  // flushed and closed
  options.shared_options.writer_id = "second";
  ASSERT_OK_AND_ASSIGN(auto second, ServerPromptCache::Open(options));
  std::optional<ModelFingerprint> fp = second->models().Find("model-y");
  ASSERT_TRUE(fp.has_value());
  Tokens query = tokens;
  query.push_back(-1);
  ASSERT_OK_AND_ASSIGN(auto hit, second->Fetch(*fp, query));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tier, PromptCacheTier::kShared);
  EXPECT_EQ(hit->reused, 2 * kC);
  EXPECT_EQ(hit->foreign_tokens, 2 * kC);
}

}  // namespace
}  // namespace kvstore::testing
