// 64-bit hashes of (model, token prefix) keys, computed for every prefix of
// a prompt in one pass, so that a longest-prefix lookup is O(prompt).
// Collisions are possible: an index compares the key itself before it
// serves an entry.
#ifndef KVSTORE_LIBKVSTORE_TIERS_PREFIX_HASH_H_
#define KVSTORE_LIBKVSTORE_TIERS_PREFIX_HASH_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvstore {

// The key an entry is stored under: a model key and a token prefix.
struct PrefixKey {
  std::string model;
  std::vector<int32_t> tokens;
};

// The hash of (model, no tokens).
inline uint64_t PrefixHashSeed(std::string_view model) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the model's bytes
  for (unsigned char c : model) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The hash of a key extended by one token.
inline uint64_t PrefixHashStep(uint64_t h, int32_t token) {
  h ^= static_cast<uint32_t>(token);
  h *= 0x100000001b3ull;  // FNV-1a over 32-bit tokens, then a shift to mix the high bits down
  return h ^ (h >> 29);
}

// The hash of (model, tokens).
inline uint64_t KeyHash(std::string_view model, std::span<const int32_t> tokens) {
  uint64_t h = PrefixHashSeed(model);
  for (int32_t t : tokens) h = PrefixHashStep(h, t);
  return h;
}

// out[n] = KeyHash(model, tokens.first(n)) for n in [0, tokens.size()].
inline std::vector<uint64_t> PrefixHashes(std::string_view model, std::span<const int32_t> tokens) {
  std::vector<uint64_t> out(tokens.size() + 1);
  out[0] = PrefixHashSeed(model);
  for (size_t i = 0; i < tokens.size(); ++i) out[i + 1] = PrefixHashStep(out[i], tokens[i]);
  return out;
}

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_PREFIX_HASH_H_
