#include "apps/prompt_cache_sim/workload.h"

#include "kvstore/float16.h"
#include "kvstore/kv_cache.h"

namespace sim {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Each tenant's K/V differ (a sim's stand-in for "written by that tenant"),
// so a row served across tenants is recognised by its bytes.
std::vector<uint64_t> PrefixHashes(const std::vector<int32_t>& tokens, int64_t n, int tenant) {
  const uint64_t seed = tenant < 0 ? 0 : Mix(0x7e4a17ull + static_cast<uint64_t>(tenant));
  std::vector<uint64_t> h(static_cast<size_t>(n) + 1, 0x9e3779b97f4a7c15ull ^ seed);
  for (int64_t i = 0; i < n; ++i) h[i + 1] = Mix(h[i] ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(rng() % 32000));
  return out;
}

}  // namespace

Workload::Workload(const WorkloadOptions& options) : options_(options) {
  std::mt19937_64 rng(options.seed);
  for (int s = 0; s < options.systems; ++s) systems_.push_back(RandomTokens(rng, options.system_tokens));
  turns_.resize(static_cast<size_t>(options.conversations));
  for (auto& conversation : turns_) {
    conversation.resize(static_cast<size_t>(options.turns));
    for (auto& depth : conversation) {
      for (int b = 0; b < options.branches; ++b) depth.push_back(RandomTokens(rng, options.turn_tokens));
    }
  }
}

Request Workload::Next(std::mt19937_64& rng) const {
  Request r;
  const size_t c = rng() % turns_.size();
  // Conversations on one system prompt go to different tenants, who would share it without salts.
  if (options_.tenants > 0) r.tenant = static_cast<int>(c / systems_.size() % static_cast<size_t>(options_.tenants));
  r.tokens = systems_[c % systems_.size()];
  r.boundaries.push_back(static_cast<int64_t>(r.tokens.size()));
  const size_t depth = rng() % (turns_[c].size() + 1);
  for (size_t d = 0; d < depth; ++d) {
    const auto& turn = turns_[c][d][rng() % turns_[c][d].size()];
    r.tokens.insert(r.tokens.end(), turn.begin(), turn.end());
    r.boundaries.push_back(static_cast<int64_t>(r.tokens.size()));
  }
  const int tail = options_.tail_tokens > 0 ? static_cast<int>(rng() % (options_.tail_tokens + 1)) : 0;
  for (int i = 0; i < tail; ++i) r.tokens.push_back(static_cast<int32_t>(rng() % 32000));
  return r;
}

kvstore::Array Workload::Rows(const std::vector<int32_t>& tokens, const std::vector<uint64_t>& prefix, int64_t layer,
                              int64_t from, int64_t to, bool value) const {
  const int64_t width = options_.heads * options_.dim;
  std::vector<uint16_t> v(static_cast<size_t>((to - from) * width));
  // [1, heads, rows, dim] row-major: element (h, p, d).
  for (int64_t p = from; p < to; ++p) {
    const uint64_t base = Mix(layer * 1315423911ull + p * 2654435761ull + (value ? 7 : 0)) ^ prefix[p + 1];
    for (int64_t i = 0; i < width; ++i) {
      const uint64_t h = Mix(base ^ Mix(static_cast<uint64_t>(i) * 97) ^ static_cast<uint32_t>(tokens[p]));
      const int64_t head = i / options_.dim, d = i % options_.dim;
      v[static_cast<size_t>((head * (to - from) + (p - from)) * options_.dim + d)] =
          kvstore::FloatToHalf(static_cast<float>(static_cast<int64_t>(h % 2001) - 1000) / 1000.0f);
    }
  }
  return kvstore::Array::FromValues<uint16_t>(kvstore::DType::kF16, {1, options_.heads, to - from, options_.dim}, v);
}

bool Workload::Extend(kvstore::PromptCache& cache, const std::vector<int32_t>& tokens, int64_t from, int64_t to,
                      int tenant) const {
  if (from >= to) return true;
  const std::vector<uint64_t> prefix = PrefixHashes(tokens, to, tenant);
  for (int64_t l = 0; l < options_.layers; ++l) {
    if (!cache[l]->UpdateAndFetch(Rows(tokens, prefix, l, from, to, false), Rows(tokens, prefix, l, from, to, true))
             .ok()) {
      return false;
    }
  }
  return true;
}

kvstore::PromptCache Workload::Prefill(const std::vector<int32_t>& tokens) const {
  kvstore::PromptCache cache;
  for (int64_t l = 0; l < options_.layers; ++l) cache.push_back(std::make_shared<kvstore::KVCache>());
  (void)Extend(cache, tokens, 0, static_cast<int64_t>(tokens.size()));
  return cache;
}

bool Workload::Matches(const kvstore::PromptCache& cache, const std::vector<int32_t>& tokens, int64_t n,
                       int tenant) const {
  for (const auto& layer : cache) {
    if (layer->offset().value_or(-1) != n) return false;
  }
  return RowsMatch(cache, tokens, 0, n, tenant);
}

bool Workload::RowsMatch(const kvstore::PromptCache& cache, const std::vector<int32_t>& tokens, int64_t from,
                         int64_t to, int tenant) const {
  if (static_cast<int64_t>(cache.size()) != options_.layers) return false;
  const std::vector<uint64_t> prefix = PrefixHashes(tokens, to, tenant);
  for (int64_t l = 0; l < options_.layers; ++l) {
    if (cache[l]->offset().value_or(-1) < to) return false;
    auto state = cache[l]->State();
    if (!state.ok()) return false;
    if (!(*state)[0].array().Slice(2, from, to).ContentEquals(Rows(tokens, prefix, l, from, to, false)) ||
        !(*state)[1].array().Slice(2, from, to).ContentEquals(Rows(tokens, prefix, l, from, to, true))) {
      return false;
    }
  }
  return true;
}

}  // namespace sim
