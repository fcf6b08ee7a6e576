// GranuleIndex: finds, among registered token sequences, the one sharing
// the longest common prefix with a query, even when it is longer than the
// query (the "edit the last message" lookup of the memory and disk tiers).
// Each sequence registers the hash of its first k*G tokens for every k, so
// a lookup probes O(query / G) hashes, longest first, and compares at most
// kMaxCandidates sequences per probe token by token: candidates found at
// granule k*G share at least k*G tokens and, unless shorter, fewer than
// (k+1)*G, so the first granule with a match wins. Hashes come from
// PrefixHashes (prefix_hash.h) and include the model; sequences are always
// compared exactly. Not thread-safe: the owning tier's lock guards it.
#ifndef KVSTORE_LIBKVSTORE_TIERS_GRANULE_INDEX_H_
#define KVSTORE_LIBKVSTORE_TIERS_GRANULE_INDEX_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvstore {

template <typename Id>
class GranuleIndex {
 public:
  static constexpr int64_t kGranule = 32;  // G
  static constexpr int kMaxCandidates = 8;

  // What a lookup compares: the model and tokens registered under an id.
  struct Sequence {
    std::string_view model;
    std::span<const int32_t> tokens;
  };
  struct Match {
    Id id;
    int64_t common = 0;  // tokens shared with the query
  };

  // Registers `id`, whose key has the prefix hashes `hashes`
  // (PrefixHashes(model, tokens)); returns the hashes registered, which
  // Remove needs.
  std::vector<uint64_t> Add(Id id, std::span<const uint64_t> hashes) {
    std::vector<uint64_t> registered;
    for (size_t a = kGranule; a < hashes.size(); a += kGranule) {
      registered.push_back(hashes[a]);
      granules_.emplace(hashes[a], id);
    }
    return registered;
  }

  void Remove(Id id, std::span<const uint64_t> registered) {
    for (uint64_t g : registered) {
      auto [first, last] = granules_.equal_range(g);
      for (auto r = first; r != last; ++r) {
        if (r->second == id) {
          granules_.erase(r);
          break;
        }
      }
    }
  }

  // The registered sequence of `model` sharing the most (more than
  // `at_least`) tokens with `query`; nullopt when none does. `hashes` is
  // PrefixHashes(model, query); `sequence_of(id)` returns a registered
  // id's Sequence.
  template <typename SequenceOf>
  std::optional<Match> FindLonger(std::string_view model, std::span<const int32_t> query,
                                  std::span<const uint64_t> hashes, int64_t at_least,
                                  const SequenceOf& sequence_of) const {
    const int64_t q = static_cast<int64_t>(query.size());
    // A sequence found at granule a shares fewer than a + G tokens.
    for (int64_t a = q / kGranule * kGranule; a + kGranule - 1 > at_least && a >= kGranule; a -= kGranule) {
      auto [first, last] = granules_.equal_range(hashes[static_cast<size_t>(a)]);
      std::optional<Match> best;
      int checked = 0;
      for (auto it = first; it != last && checked < kMaxCandidates; ++it, ++checked) {
        const Sequence s = sequence_of(it->second);
        if (s.model != model || static_cast<int64_t>(s.tokens.size()) < a ||
            !std::equal(s.tokens.begin(), s.tokens.begin() + a, query.begin())) {
          continue;
        }
        int64_t common = a;
        const int64_t limit = std::min<int64_t>(q, static_cast<int64_t>(s.tokens.size()));
        while (common < limit && s.tokens[common] == query[common]) ++common;
        if (!best || common > best->common) best = Match{it->second, common};
      }
      if (!best) continue;
      if (best->common <= at_least) return std::nullopt;
      return best;
    }
    return std::nullopt;
  }

 private:
  std::unordered_multimap<uint64_t, Id> granules_;  // hash of a k*G prefix -> id
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_GRANULE_INDEX_H_
