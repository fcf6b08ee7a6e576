#include "libkvstore/tiers/store_index.h"

#include "libkvstore/tiers/prefix_hash.h"

namespace kvstore {

void StoreIndex::CountBase(const std::string& base, int delta) {
  if (base.empty()) return;
  if ((dependents_[base] += delta) <= 0) dependents_.erase(base);
}

const StoreIndex::Entry& StoreIndex::Insert(Entry entry, uint64_t key_hash) {
  if (const auto* old = index_.Find(entry.file)) CountBase(old->value.base, -1);
  CountBase(entry.base, +1);
  entry.generation = next_generation_++;
  const std::vector<uint64_t> hashes =
      entry.may_trim ? PrefixHashes(entry.key.model, entry.key.tokens) : std::vector<uint64_t>{};
  const std::string file = entry.file;
  PrefixIndex<std::string, Entry>::Node* node = nullptr;
  index_.Insert(file, std::move(entry), key_hash, hashes, &node);
  return node->value;
}

bool StoreIndex::Erase(const std::string& file, std::optional<uint64_t> generation) {
  const auto* node = index_.Find(file);
  if (node == nullptr || (generation && node->value.generation != *generation)) return false;
  CountBase(node->value.base, -1);
  index_.Erase(file);
  return true;
}

const StoreIndex::Entry* StoreIndex::FindLongestPrefix(std::string_view model, std::span<const int32_t> tokens,
                                                       std::span<const uint64_t> prefix_hashes, size_t max_len) {
  const auto* node = index_.FindLongestPrefix(model, tokens, prefix_hashes, max_len);
  return node ? &node->value : nullptr;
}

const StoreIndex::Entry* StoreIndex::FindLonger(std::string_view model, std::span<const int32_t> tokens,
                                                std::span<const uint64_t> prefix_hashes, int64_t at_least,
                                                int64_t& common) {
  const auto* node = index_.FindLonger(model, tokens, prefix_hashes, at_least, common);
  return node ? &node->value : nullptr;
}

void StoreIndex::MarkUntrimmable(const std::string& file, uint64_t generation) {
  auto* node = index_.Find(file);
  if (node == nullptr || node->value.generation != generation) return;
  node->value.may_trim = false;
  index_.MarkUntrimmable(*node);
}

const StoreIndex::Entry* StoreIndex::Find(const std::string& file) {
  const auto* node = index_.Find(file);
  return node ? &node->value : nullptr;
}

void StoreIndex::Touch(const std::string& file) {
  if (auto* node = index_.Find(file)) index_.Touch(*node);
}

std::vector<std::string> StoreIndex::DependentsOf(const std::string& file) const {
  std::vector<std::string> out;
  if (!HasDependents(file)) return out;
  index_.ForEach([&](const Entry& e) {
    if (e.base == file) out.push_back(e.file);
  });
  return out;
}

const StoreIndex::Entry* StoreIndex::LeastRecent() const {
  const auto* node = index_.LeastRecent();
  return node ? &node->value : nullptr;
}

void StoreIndex::ForEach(const std::function<void(const Entry&)>& fn) const { index_.ForEach(fn); }

}  // namespace kvstore
