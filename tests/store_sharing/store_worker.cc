// kvstore_store_worker: one process of the store-sharing tests
// (prompt_cache_store_sharing_test.cc), on a directory other processes use
// at the same time.
//   put DIR MAX_BYTES FIRST COUNT
//       puts keys FIRST .. FIRST+COUNT-1 (store_entries.h), then exits.
//   churn DIR MAX_BYTES SEED SECONDS KEYS
//       puts and fetches random keys among KEYS for SECONDS; every hit must
//       be exactly the cache stored for its prefix (else exit 1, naming
//       it). Prints "puts P fetches F hits H foreign X" (X: hits that only
//       another process can have stored).
// Exit 2 for a store error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "kvstore/prompt_cache_store.h"
#include "store_entries.h"

namespace {

using kvstore::sharing::CacheOf;
using kvstore::sharing::IsExactly;
using kvstore::sharing::kModel;
using kvstore::sharing::TokensOfKey;

int Fail(const std::string& what) {
  std::fprintf(stderr, "store_worker: %s\n", what.c_str());
  return 2;
}

int Put(kvstore::PromptCacheStore& store, int64_t first, int64_t count) {
  for (int64_t key = first; key < first + count; ++key) {
    const std::vector<int32_t> tokens = TokensOfKey(key);
    kvstore::Status s = store.Put(kModel, tokens, CacheOf(tokens, static_cast<int64_t>(tokens.size())));
    if (!s.ok()) return Fail("put " + std::to_string(key) + ": " + s.ToString());
  }
  return 0;
}

int Churn(kvstore::PromptCacheStore& store, uint64_t seed, double seconds, int64_t keys) {
  std::mt19937_64 random(seed);
  std::set<int64_t> mine;  // keys this process put
  int64_t puts = 0, fetches = 0, hits = 0, foreign = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    const int64_t key = static_cast<int64_t>(random() % static_cast<uint64_t>(keys));
    const std::vector<int32_t> tokens = TokensOfKey(key);
    if (random() % 2 == 0) {
      kvstore::Status s = store.Put(kModel, tokens, CacheOf(tokens, static_cast<int64_t>(tokens.size())));
      if (!s.ok()) return Fail("put " + std::to_string(key) + ": " + s.ToString());
      mine.insert(key);
      ++puts;
      continue;
    }
    ++fetches;
    auto hit = store.FetchLongestPrefix(kModel, tokens);
    if (!hit.ok()) return Fail("fetch " + std::to_string(key) + ": " + hit.status().ToString());
    if (!hit->has_value()) continue;
    ++hits;
    const int64_t length = (*hit)->length;
    if (!IsExactly((*hit)->cache, tokens, length)) {
      std::fprintf(stderr, "store_worker: WRONG KV for key %lld at %lld tokens\n", static_cast<long long>(key),
                   static_cast<long long>(length));
      return 1;
    }
    // Only an entry of this group holding >= `length` tokens can serve it.
    bool own = false;
    for (int64_t k = (key / 5) * 5; k < (key / 5) * 5 + 5; ++k) {
      if (static_cast<int64_t>(TokensOfKey(k).size()) >= length && mine.contains(k)) own = true;
    }
    if (!own) ++foreign;
  }
  std::printf("puts %lld fetches %lld hits %lld foreign %lld\n", static_cast<long long>(puts),
              static_cast<long long>(fetches), static_cast<long long>(hits), static_cast<long long>(foreign));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) return Fail("usage: put DIR MAX_BYTES FIRST COUNT | churn DIR MAX_BYTES SEED SECONDS KEYS");
  const std::string mode = argv[1];
  kvstore::PromptCacheStoreOptions options;
  options.max_bytes = std::atoll(argv[3]);
  auto store = kvstore::PromptCacheStore::Open(kvstore::Env::Default(), argv[2], options);
  if (!store.ok()) return Fail(store.status().ToString());
  if (auto indexed = (*store)->WaitUntilIndexed(); !indexed.ok()) return Fail(indexed.status().ToString());
  if (mode == "put") return Put(**store, std::atoll(argv[4]), std::atoll(argv[5]));
  if (mode == "churn" && argc >= 7) return Churn(**store, std::strtoull(argv[4], nullptr, 10), std::atof(argv[5]), std::atoll(argv[6]));
  return Fail("unknown mode " + mode);
}
