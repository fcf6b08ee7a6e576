// Helpers shared by the prompt-cache file tests.
#ifndef KVSTORE_TESTS_PROMPT_CACHE_TESTUTIL_H_
#define KVSTORE_TESTS_PROMPT_CACHE_TESTUTIL_H_

#include <map>
#include <string>
#include <vector>

#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/integrity/sha256.h"
#include "testutil.h"

namespace kvstore::testing {

// "key" -> sha256 of every array in a state tree (keys relative to the layer).
inline void StateDigests(const CacheState& s, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (s.is_array()) {
    out[prefix] = Sha256(s.array()).ToHex();
  } else if (s.is_list()) {
    for (size_t i = 0; i < s.size(); ++i) {
      StateDigests(s[i], prefix.empty() ? std::to_string(i) : prefix + "." + std::to_string(i), out);
    }
  }
}

// A layer's class, meta state and state digests, for comparing two loads.
inline std::string Fingerprint(const Cache& c) {
  std::string out = std::string(c.class_name()) + " " + c.meta_state().DebugString();
  if (c.offset()) out += " offset=" + std::to_string(*c.offset());
  Result<CacheState> state = c.State();
  if (!state.ok()) return out + " state: " + state.status().ToString();
  std::map<std::string, std::string> d;
  StateDigests(*state, "", d);
  for (const auto& [k, v] : d) out += " " + k + "=" + v.substr(0, 16);
  return out;
}

// A KVCache and a RotatingKVCache after 5 tokens (F16, B=1, H=2, D=8).
inline PromptCache SmallCache() {
  auto kv = std::make_shared<KVCache>();
  Array k = RandomArray(DType::kF16, {1, 2, 5, 8}, 1);
  Array v = RandomArray(DType::kF16, {1, 2, 5, 8}, 2);
  EXPECT_TRUE(kv->UpdateAndFetch(k, v).ok());
  auto rot = std::make_shared<RotatingKVCache>(4, 1);
  EXPECT_TRUE(rot->UpdateAndFetch(k, v).ok());
  return {kv, rot};
}

// Writes a safetensors file with exactly these tensors and metadata.
inline Status WriteRaw(Env* env, const std::string& path, const std::vector<NamedArray>& tensors,
                       const Metadata& metadata) {
  return WriteFileAtomic(env, path, [&](WritableFile& f) { return WriteSafetensors(f, tensors, metadata); });
}

// Both files hold the same tensors: names, dtypes, shapes and bytes.
inline void ExpectSameTensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  ASSERT_EQ(a.header().tensors.size(), b.header().tensors.size());
  for (const TensorInfo& t : a.header().tensors) {
    const TensorInfo* u = b.header().FindTensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dtype, t.dtype) << t.name;
    EXPECT_EQ(u->shape, t.shape) << t.name;
    const auto x = a.TensorBytes(t), y = b.TensorBytes(*u);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << t.name;
  }
}

inline std::vector<std::byte> FileBytes(Env* env, const std::string& path) {
  Result<std::shared_ptr<const ReadableFile>> f = env->OpenReadable(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return {};
  return std::vector<std::byte>((*f)->data().begin(), (*f)->data().end());
}

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_PROMPT_CACHE_TESTUTIL_H_
