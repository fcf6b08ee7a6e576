// Tenant salts (vLLM's cache_salt): the keys derived from a salt, keys of
// requests without one unchanged, and no tier sharing a prefix between
// tenants or letting one tenant's entries change another's lookups.
#include "kvstore/tenant_salt.h"

#include <algorithm>

#include "kvstore/kv_cache.h"
#include "kvstore/server_prompt_cache.h"
#include "libkvstore/shared_tier/chunk_keys.h"
#include "libkvstore/tiers/prefix_index.h"
#include "libkvstore/tiers/store_format.h"
#include "shared_tier_testutil.h"

namespace kvstore {
namespace {

using testing::Describe;
using testing::HasCode;
using testing::Iota;
using testing::Tokens;

// A salt that must never appear in a file, a key or a value.
constexpr std::string_view kSecretSalt = "salt-of-tenant-a-XYZZY";

TenantSalt Salt(std::string_view salt) { return TenantSalt::Make(salt).value(); }

PromptCache Prompt(int64_t tokens, uint64_t seed) { return testing::OneLayerPrompt(tokens, seed); }
const ModelFingerprint& Model() { return testing::OneLayerModel(); }

TEST(TenantSaltTest, KeysAreHkdfSha256OfTheSalt) {
  // RFC 5869 with salt "kvstore-tenant/1", IKM the tenant salt, info the
  // tier, L = 32 (values from Python's cryptography HKDF).
  const TenantSalt t = Salt("tenant-a");
  EXPECT_EQ(t.key_hex(TenantSalt::Tier::kMemory), "621f5a4864f4a60e4c7b01731926cfe383ad9029f2d2d8dcb6e69fe5e6703055");
  EXPECT_EQ(t.key_hex(TenantSalt::Tier::kDisk), "4cd35e01358b61f06d1db202109f76867048b8caf978281da197bdd1c4e0bee5");
  EXPECT_EQ(t.key_hex(TenantSalt::Tier::kShared), "f99d76d2e63e0b0538b0d21d888f505f8ab9f9fdf6e8e3cd43d3264773027441");
  EXPECT_EQ(Salt("tenant-a"), t);
  EXPECT_FALSE(Salt("tenant-b") == t);
}

TEST(TenantSaltTest, AnEmptySaltIsRefusedWithoutEcho) {
  Result<TenantSalt> empty = TenantSalt::Make("");
  EXPECT_THAT(empty.status(), HasCode(StatusCode::kInvalidArgument,
                                      "tenant salt: empty (pass no salt for requests without one)"));
}

// Keys of requests without a salt are the ones the tiers always used.
TEST(TenantSaltTest, NoSaltKeepsEveryKey) {
  EXPECT_EQ(SaltedMemoryKey("m3", nullptr), "m3");
  EXPECT_EQ(SaltedStoreModelKey("llama", nullptr), "llama");
  const Tokens t = {1, 2, 3};
  EXPECT_EQ(StoreFileName("m", t), "29485540f37f95dc.safetensors");  // SHA-256("m\n1,2,3")
  const ChunkNamespace ns = MakeChunkNamespace(Model(), 16);
  EXPECT_EQ(ns.digest, Sha256(std::string_view("kvstore-namespace/1\n" + Model().json() + "\nchunk_tokens=16")));
  EXPECT_EQ(ns.id, MakeChunkNamespace(Model(), 16, {}, nullptr).id);
  EXPECT_EQ(ns.id, "208de783ba1a12d0a9de414d0ee35adc");
}

TEST(TenantSaltTest, EveryTiersKeyDependsOnTheSalt) {
  const TenantSalt a = Salt("tenant-a"), b = Salt("tenant-b");
  EXPECT_EQ(SaltedMemoryKey("m3", &a), "m3\ntenant=" + a.key_hex(TenantSalt::Tier::kMemory));
  EXPECT_NE(SaltedMemoryKey("m3", &a), SaltedMemoryKey("m3", &b));
  EXPECT_EQ(SaltedStoreModelKey("llama", &a), "llama\ntenant=" + a.key_hex(TenantSalt::Tier::kDisk));
  const Tokens t = {1, 2, 3};
  EXPECT_NE(StoreFileName(SaltedStoreModelKey("m", &a), t), StoreFileName("m", t));
  const ChunkNamespace plain = MakeChunkNamespace(Model(), 16);
  const ChunkNamespace na = MakeChunkNamespace(Model(), 16, {}, &a), nb = MakeChunkNamespace(Model(), 16, {}, &b);
  EXPECT_NE(na.id, plain.id);
  EXPECT_NE(na.id, nb.id);
  EXPECT_EQ(na.digest, Sha256(std::string_view("kvstore-namespace/1\n" + Model().json() + "\nchunk_tokens=16\ntenant=" +
                                               a.key_hex(TenantSalt::Tier::kShared))));
  // Every chunk key differs, the first one too.
  const Tokens chunk = Iota(16);
  EXPECT_NE(NextChainHash(na, nullptr, chunk), NextChainHash(plain, nullptr, chunk));
  EXPECT_NE(NextChainHash(na, nullptr, chunk), NextChainHash(nb, nullptr, chunk));
}

// The exact-prefix lookup probes the key lengths its own model key holds:
// entries of another tenant (another memory key) add no work to it.
TEST(TenantSaltTest, AnotherTenantsEntriesDoNotChangeTheLookupsWork) {
  struct Value {
    PrefixKey key;
    int64_t bytes = 0;
  };
  PrefixIndex<int, Value> index;
  int next_id = 0;
  auto add = [&](const std::string& model, const Tokens& tokens) {
    index.Insert(next_id++, Value{{model, tokens}, 1}, KeyHash(model, tokens), {});
  };
  const TenantSalt tenant_a = Salt("tenant-a"), tenant_b = Salt("tenant-b");
  const std::string a = SaltedMemoryKey("m", &tenant_a), b = SaltedMemoryKey("m", &tenant_b);
  const Tokens query = Iota(100);
  add(b, Tokens(query.begin(), query.begin() + 10));
  auto probes_for_b = [&] {
    const int64_t before = index.probes();
    const std::vector<uint64_t> hashes = PrefixHashes(b, query);
    EXPECT_NE(index.FindLongestPrefix(b, query, hashes, query.size()), nullptr);
    return index.probes() - before;
  };
  const int64_t alone = probes_for_b();
  for (int64_t n = 11; n <= 100; n += 7) add(a, Tokens(query.begin(), query.begin() + n));
  EXPECT_EQ(probes_for_b(), alone);
  // Tenant a's lookup for the same prompt finds its own entries only.
  const std::vector<uint64_t> hashes = PrefixHashes(a, query);
  const auto* found = index.FindLongestPrefix(a, query, hashes, query.size());
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->value.key.model, a);
  EXPECT_EQ(index.FindLongestPrefix(a, query, hashes, 10), nullptr);
}

struct Tiers {
  std::unique_ptr<Env> env = NewMemEnv();
  std::unique_ptr<KvBackend> backend = NewMemKvBackend();
  std::unique_ptr<PromptCacheStore> store;
  std::unique_ptr<SharedPromptCache> shared;
  Tiers() {
    store = PromptCacheStore::Open(env.get(), "/store", {}).value();
    EXPECT_OK(store->WaitUntilIndexed());
    shared = testing::OpenTier(backend.get(), 16);
  }
  // A server that has just started: empty memory.
  std::unique_ptr<ServerPromptCache> Server(bool disk, bool shared_tier) {
    return std::make_unique<ServerPromptCache>(ServerPromptCacheOptions{
        .disk = disk ? store.get() : nullptr, .shared = shared_tier ? shared.get() : nullptr,
        .async_writes = false});
  }
};

PromptScope Scope(const std::optional<TenantSalt>& tenant) {
  return PromptScope{Model().digest().ToHex(), Model(), tenant};
}

// Which tier served `tokens` to `tenant`, "miss" for none.
std::string Served(ServerPromptCache& cache, const std::optional<TenantSalt>& tenant, const Tokens& tokens) {
  Result<std::optional<ServerPromptCache::Hit>> hit = cache.Fetch(Scope(tenant), tokens);
  EXPECT_OK(hit);
  if (!hit.ok() || !*hit) return "miss";
  return std::string(PromptCacheTierName((*hit)->tier)) + ":" + std::to_string((*hit)->reused);
}

TEST(TenantSaltTest, TenantsNeverShareAPrefixInAnyTier) {
  Tiers tiers;
  const std::optional<TenantSalt> a = Salt(kSecretSalt), b = Salt("tenant-b"), none;
  const Tokens prompt = Iota(64);
  Tokens longer = prompt;
  longer.push_back(5);
  const Tokens first_chunk(prompt.begin(), prompt.begin() + 16);
  {
    auto writer = tiers.Server(true, true);
    ASSERT_OK(writer->Insert(Scope(a), prompt, Prompt(64, 3)));
    writer->Flush();
    // Memory: a is served, b and requests without a salt are not, for an
    // exact repeat, a longer prompt or the first chunk alone.
    EXPECT_EQ(Served(*writer, a, longer), "memory:64");
    for (const auto& other : {b, none}) {
      EXPECT_EQ(Served(*writer, other, prompt), "miss");
      EXPECT_EQ(Served(*writer, other, longer), "miss");
      EXPECT_EQ(Served(*writer, other, first_chunk), "miss");
    }
  }
  // Disk (a restart, no shared tier), then the shared tier (another server, no disk).
  for (const auto& [disk, shared, tier] : {std::tuple{true, false, "disk"}, std::tuple{false, true, "shared"}}) {
    SCOPED_TRACE(tier);
    for (const auto& other : {b, none}) {
      EXPECT_EQ(Served(*tiers.Server(disk, shared), other, longer), "miss");
      EXPECT_EQ(Served(*tiers.Server(disk, shared), other, first_chunk), "miss");
    }
    EXPECT_EQ(Served(*tiers.Server(disk, shared), a, longer), std::string(tier) + ":64");
  }
  // And the other way round: entries without a salt serve no tenant.
  auto plain = tiers.Server(true, true);
  ASSERT_OK(plain->Insert(Scope(none), longer, Prompt(65, 4)));
  plain->Flush();
  EXPECT_EQ(Served(*tiers.Server(true, true), none, longer), "disk:64");
  EXPECT_EQ(Served(*tiers.Server(true, true), b, longer), "miss");
  EXPECT_EQ(tiers.store->entries(), 2);
}

// The same tokens from two tenants: two entries, each served its own bytes.
TEST(TenantSaltTest, EachTenantIsServedItsOwnCache) {
  Tiers tiers;
  const std::optional<TenantSalt> a = Salt("tenant-a"), b = Salt("tenant-b");
  const Tokens prompt = Iota(32);
  auto server = tiers.Server(true, true);
  ASSERT_OK(server->Insert(Scope(a), prompt, Prompt(32, 1)));
  ASSERT_OK(server->Insert(Scope(b), prompt, Prompt(32, 2)));
  server->Flush();
  for (bool disk : {true, false}) {
    for (const auto& [tenant, seed] : {std::pair{a, 1}, std::pair{b, 2}}) {
      auto hit = tiers.Server(disk, !disk)->Fetch(Scope(tenant), prompt).value();
      ASSERT_TRUE(hit.has_value());
      EXPECT_EQ(Describe(hit->cache), Describe(testing::TrimmedTo(Prompt(32, static_cast<uint64_t>(seed)), 31)));
    }
  }
}

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// The salt is in no file name, file, manifest line, Redis key or value.
TEST(TenantSaltTest, TheSaltIsStoredNowhere) {
  Tiers tiers;
  auto server = tiers.Server(true, true);
  ASSERT_OK(server->Insert(Scope(Salt(kSecretSalt)), Iota(48), Prompt(48, 1)));
  server->Flush();
  tiers.store.reset();  // writes the manifest
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> files, tiers.env->GetChildren("/store"));
  int checked = 0;
  for (const std::string& name : files) {
    EXPECT_FALSE(Contains(name, kSecretSalt));
    ASSERT_OK_AND_ASSIGN(auto file, tiers.env->OpenReadable("/store/" + name));
    const std::string_view bytes(reinterpret_cast<const char*>(file->data().data()), file->data().size());
    EXPECT_FALSE(Contains(bytes, kSecretSalt)) << name;
    ++checked;
  }
  EXPECT_GE(checked, 2);  // an entry and the manifest (and the lock)
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> keys, tiers.backend->Scan("", 1000));
  ASSERT_OK_AND_ASSIGN(auto values, tiers.backend->Get(keys));
  EXPECT_EQ(keys.size(), 5u);  // the tenant's namespace descriptor, the model record, 3 chunks
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_FALSE(Contains(keys[i], kSecretSalt));
    ASSERT_TRUE(values[i].has_value());
    EXPECT_FALSE(Contains(*values[i], kSecretSalt)) << keys[i];
  }
}

}  // namespace
}  // namespace kvstore
