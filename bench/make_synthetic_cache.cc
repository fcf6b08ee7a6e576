// kvstore_make_cache: writes a synthetic prompt cache for the file benchmarks:
// LAYERS x KVCache of [1, 8, TOKENS, 128] BF16 keys/values, values ~ N(0, 1).
//   kvstore_make_cache OUT TOKENS [LAYERS=32]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kvstore/float16.h"
#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_file.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kvstore_make_cache OUT TOKENS [LAYERS]\n");
    return 1;
  }
  const int64_t tokens = std::atoll(argv[2]);
  const int layers = argc > 3 ? std::atoi(argv[3]) : 32;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  kvstore::PromptCache cache;
  const kvstore::Shape shape = {1, 8, tokens, 128};
  std::vector<uint16_t> buf(static_cast<size_t>(kvstore::ShapeNumel(shape)));
  for (int l = 0; l < layers; ++l) {
    auto kv = std::make_shared<kvstore::KVCache>();
    kvstore::Array kv_arrays[2];
    for (auto& a : kv_arrays) {
      for (auto& x : buf) x = kvstore::FloatToBFloat16(dist(rng));
      a = kvstore::Array::FromValues<uint16_t>(kvstore::DType::kBF16, shape, buf);
    }
    if (!kv->SetState(kvstore::CacheState({kv_arrays[0], kv_arrays[1]})).ok()) return 1;
    cache.push_back(kv);
  }
  kvstore::SavePromptCacheOptions options;
  options.integrity = false;
  kvstore::Status s = kvstore::SavePromptCache(kvstore::Env::Default(), argv[1], cache, {{"model", "synthetic"}}, options);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
