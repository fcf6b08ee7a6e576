// kvstore_crash_writer PATH [once]: saves a prompt cache to PATH over and
// over, alternating between two versions ("A" and "B" in the metadata), until
// killed. With "once" it saves version A a single time and exits.
#include <cstdio>
#include <cstring>

#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_file.h"

namespace {
kvstore::PromptCache MakeCache(float value) {
  kvstore::PromptCache cache;
  for (int l = 0; l < 4; ++l) {
    auto kv = std::make_shared<kvstore::KVCache>();
    std::vector<float> v(1 * 8 * 512 * 64, value + static_cast<float>(l));
    kvstore::Array a = kvstore::Array::FromValues<float>(kvstore::DType::kF32, {1, 8, 512, 64}, v);
    if (!kv->SetState(kvstore::CacheState({a, a})).ok()) std::abort();
    cache.push_back(kv);
  }
  return cache;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 1;
  const kvstore::PromptCache a = MakeCache(1.0f), b = MakeCache(2.0f);
  bool once = false;
  kvstore::SavePromptCacheOptions options;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "once") == 0) once = true;
    // As the disk tier writes: XXH3-128 digests, temp file + rename without fsync.
    if (std::strcmp(argv[i], "fast") == 0) {
      options.digest = kvstore::DigestAlgorithm::kXxh3_128;
      options.durability = kvstore::Durability::kNone;
    }
  }
  for (int i = 0;; ++i) {
    const bool first = i % 2 == 0;
    kvstore::Status s = kvstore::SavePromptCache(kvstore::Env::Default(), argv[1], first ? a : b,
                                                 {{"version", first ? "A" : "B"}}, options);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    if (once) return 0;
  }
}
