// The entries the store-sharing processes write and check: key k's tokens
// and the one cache every process makes for a token prefix, so that any
// process can tell whether what a fetch served is exactly what was stored
// for that prefix, whoever stored it.
#ifndef KVSTORE_TESTS_STORE_SHARING_STORE_ENTRIES_H_
#define KVSTORE_TESTS_STORE_SHARING_STORE_ENTRIES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "kvstore/cache_diff.h"
#include "kvstore/kv_cache.h"

namespace kvstore::sharing {

inline constexpr char kModel[] = "sharing-model";

// Keys come in groups of five that extend each other (8, 12, ... 24
// tokens), so a fetch also finds shorter stored prefixes.
inline std::vector<int32_t> TokensOfKey(int64_t key) {
  const int64_t group = key / 5;
  const int64_t length = 8 + (key % 5) * 4;
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < length; ++i) tokens.push_back(static_cast<int32_t>(group * 1000 + i));
  return tokens;
}

// The cache of the first `length` tokens of `tokens`: one KVCache layer of
// [1, 2, length, 8] F32 whose values depend on every token.
inline PromptCache CacheOf(const std::vector<int32_t>& tokens, int64_t length) {
  uint64_t h = 1469598103934665603ull;
  std::vector<float> k, v;
  for (int64_t t = 0; t < length; ++t) {
    h = (h ^ static_cast<uint64_t>(tokens[t])) * 1099511628211ull;
    for (int i = 0; i < 2 * 8; ++i) {
      k.push_back(static_cast<float>((h >> (i % 32)) & 0xffff));
      v.push_back(static_cast<float>(t * 16 + i));
    }
  }
  // [1, 2, length, 8]: rows are tokens within a head; head 1 repeats head 0.
  std::vector<float> keys(2 * length * 8), values(2 * length * 8);
  for (int64_t head = 0; head < 2; ++head) {
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t d = 0; d < 8; ++d) {
        keys[(head * length + t) * 8 + d] = k[t * 16 + head * 8 + d];
        values[(head * length + t) * 8 + d] = v[t * 16 + head * 8 + d];
      }
    }
  }
  auto kv = std::make_shared<KVCache>();
  const Array ka = Array::FromValues<float>(DType::kF32, {1, 2, length, 8}, keys);
  const Array va = Array::FromValues<float>(DType::kF32, {1, 2, length, 8}, values);
  if (!kv->UpdateAndFetch(ka, va).ok()) return {};
  return {kv};
}

// True when `served` is exactly the cache stored for tokens[:length].
inline bool IsExactly(const PromptCache& served, const std::vector<int32_t>& tokens, int64_t length) {
  const PromptCache expected = CacheOf(tokens, length);
  if (served.size() != 1 || expected.size() != 1) return false;
  Result<LayerDiff> diff = DiffLayers(served[0], expected[0]);
  return diff.ok() && diff->identical;
}

}  // namespace kvstore::sharing

#endif  // KVSTORE_TESTS_STORE_SHARING_STORE_ENTRIES_H_
