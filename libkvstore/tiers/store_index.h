// The in-memory index of a PromptCacheStore: a PrefixIndex (prefix_index.h,
// shared with the memory tier) of its entries by file name, plus what only
// the disk needs: generations that tell a replaced file from the one a
// reader saw, and entries learned untrimmable at a load. Not thread-safe:
// the store's mutex guards it.
#ifndef KVSTORE_LIBKVSTORE_TIERS_STORE_INDEX_H_
#define KVSTORE_LIBKVSTORE_TIERS_STORE_INDEX_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "libkvstore/tiers/prefix_index.h"
#include "libkvstore/tiers/store_format.h"

namespace kvstore {

class StoreIndex {
 public:
  struct Entry {
    std::string file;
    StoreKey key;
    int64_t bytes = 0;
    std::string fingerprint{};  // hex digest of the model fingerprint in the file; empty when none
    uint64_t generation = 0;  // set by Insert: tells a replaced file from the one a reader saw
    // False once the cache is known to have a layer that cannot be trimmed
    // (known at a Put, learned at a load): such an entry serves only
    // prompts it is a prefix of.
    bool may_trim = true;
    // A delta entry's base (store_format.h): the entry holding its first
    // rows. Empty for a whole entry.
    std::string base{};
  };

  StoreIndex() = default;
  StoreIndex(const StoreIndex&) = delete;
  StoreIndex& operator=(const StoreIndex&) = delete;

  // Adds `entry` as the most recently used, replacing any entry of the same
  // file. `key_hash` is KeyHash(entry.key.model, entry.key.tokens).
  const Entry& Insert(Entry entry, uint64_t key_hash);

  // Removes the entry of `file` when it is there and, if `generation` is
  // given, still of that generation. True when it removed it.
  bool Erase(const std::string& file, std::optional<uint64_t> generation = std::nullopt);

  // The entry with the longest key (model, tokens[:n]), 1 <= n <= max_len,
  // compared exactly (a hash match alone is never enough), made the most
  // recently used; nullptr when there is none. REQUIRES: prefix_hashes is
  // PrefixHashes(model, tokens) and max_len <= tokens.size().
  const Entry* FindLongestPrefix(std::string_view model, std::span<const int32_t> tokens,
                                 std::span<const uint64_t> prefix_hashes, size_t max_len);

  // The entry that may be trimmed sharing the most tokens (more than
  // `at_least`) with `tokens` as `common`, made the most recently used;
  // nullptr when none does. REQUIRES: prefix_hashes as for FindLongestPrefix.
  const Entry* FindLonger(std::string_view model, std::span<const int32_t> tokens,
                          std::span<const uint64_t> prefix_hashes, int64_t at_least, int64_t& common);
  // Records that the entry of `file`, when still of `generation`, cannot
  // be trimmed: FindLonger no longer offers it.
  void MarkUntrimmable(const std::string& file, uint64_t generation);

  // The entry of `file`; nullptr when there is none.
  const Entry* Find(const std::string& file);
  // Makes the entry of `file`, if any, the most recently used.
  void Touch(const std::string& file);
  // Whether delta entries are based on `file` (O(1)), and which (O(entries)).
  bool HasDependents(const std::string& file) const { return dependents_.count(file) > 0; }
  std::vector<std::string> DependentsOf(const std::string& file) const;

  // The least recently used entry; nullptr when empty.
  const Entry* LeastRecent() const;
  // Calls `fn` on every entry, least recently used first.
  void ForEach(const std::function<void(const Entry&)>& fn) const;

  bool Contains(const std::string& file) const { return index_.Find(file) != nullptr; }
  size_t size() const { return index_.size(); }
  int64_t bytes() const { return index_.bytes(); }

 private:
  void CountBase(const std::string& base, int delta);

  PrefixIndex<std::string, Entry> index_;  // by file name
  uint64_t next_generation_ = 1;
  std::unordered_map<std::string, int64_t> dependents_;  // base file -> delta entries on it (> 0)
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_TIERS_STORE_INDEX_H_
