// Helpers for the cache tests: random keys/values, a fingerprint of
// everything a caller can observe about a cache, and the check that a failed
// call changed nothing.
#ifndef KVSTORE_TESTS_CACHE_TESTUTIL_H_
#define KVSTORE_TESTS_CACHE_TESTUTIL_H_

#include <functional>
#include <memory>
#include <string>

#include "kvstore/cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "libkvstore/integrity/sha256.h"
#include "testutil.h"

namespace kvstore::testing {

// Random keys or values [b, h, s, d] of `dtype` (F16 by default).
inline Array KV(int64_t b, int64_t h, int64_t s, int64_t d, uint64_t seed,
                DType dtype = DType::kF16) {
  return RandomArray(dtype, {b, h, s, d}, seed);
}

// Class, meta_state, offset, size, emptiness and the dtype, shape and
// SHA-256 of every array of the state: what a saved file would hold.
inline std::string StateFingerprint(const Cache& c) {
  std::string out = std::string(c.class_name()) + "|" + c.meta_state().DebugString() + "|" +
                    std::to_string(c.offset().value_or(-1)) + "|" + std::to_string(c.Size()) + "|" +
                    (c.Empty() ? "empty" : "full") + "|";
  std::function<void(const CacheState&)> walk = [&](const CacheState& st) {
    if (st.is_array()) {
      out += st.array().Describe() + ":" + Sha256(st.array()).ToHex().substr(0, 16) + ";";
    } else if (st.is_none()) {
      out += "None;";
    } else {
      out += "[";
      for (const auto& x : st.list()) walk(x);
      out += "]";
    }
  };
  Result<CacheState> s = c.State();
  if (s.ok())
    walk(*s);
  else
    out += s.status().ToString();
  return out;
}

// StateFingerprint plus trimmability and nbytes (spare capacity included):
// two caches with the same fingerprint answer every query the same way.
inline std::string Fingerprint(const Cache& c) {
  Result<int64_t> nbytes = c.Nbytes();
  return StateFingerprint(c) + "|" + (c.IsTrimmable() ? "trimmable" : "fixed") + "|" +
         (nbytes.ok() ? std::to_string(*nbytes) : nbytes.status().ToString());
}

using MakeCache = std::function<std::unique_ptr<Cache>()>;
using Mutation = std::function<Status(Cache&)>;

// UpdateAndFetch, or UpdateAndFetchQuantized for a QuantizedKVCache.
inline Status Update(Cache& c, const Array& keys, const Array& values) {
  if (auto* q = dynamic_cast<QuantizedKVCache*>(&c)) {
    return q->UpdateAndFetchQuantized(keys, values).status();
  }
  return c.UpdateAndFetch(keys, values).status();
}

// `op` on a fresh cache from `make` must fail with `code` and change
// nothing; afterwards `next` must act on it exactly as on an untouched cache.
inline void ExpectFailsUnchanged(const MakeCache& make, const Mutation& op, StatusCode code,
                                 const Mutation& next, const std::string& what) {
  SCOPED_TRACE(what);
  std::unique_ptr<Cache> cache = make();
  const std::string before = Fingerprint(*cache);
  EXPECT_THAT(op(*cache), HasCode(code, ""));
  EXPECT_EQ(Fingerprint(*cache), before);
  std::unique_ptr<Cache> control = make();
  const Status on_cache = next(*cache);
  const Status on_control = next(*control);
  EXPECT_TRUE(on_control.ok()) << on_control.ToString();
  EXPECT_EQ(on_cache.ToString(), on_control.ToString());
  EXPECT_EQ(Fingerprint(*cache), Fingerprint(*control));
}

// A cache of class T (constructed from args) holding F16 keys and F32 values
// [b, 2, s, d], so every later update is cast or promoted.
template <typename T, typename... Args>
MakeCache Filled(int64_t b, int64_t s, int64_t d, Args... args) {
  return [=] {
    std::unique_ptr<Cache> c = std::make_unique<T>(args...);
    const Status st = Update(*c, KV(b, 2, s, d, 1), KV(b, 2, s, d, 2, DType::kF32));
    EXPECT_TRUE(st.ok()) << st.ToString();
    return c;
  };
}

// What `make` builds, then `then` applied to it (e.g. a wrapping decode step).
inline MakeCache Then(MakeCache make, Mutation then) {
  return [=] {
    std::unique_ptr<Cache> c = make();
    const Status st = then(*c);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return c;
  };
}

// An update of F32 keys and BF16 values [b, 2, s, d].
inline Mutation UpdateOf(int64_t b, int64_t s, int64_t d, uint64_t seed) {
  return [=](Cache& c) {
    return Update(c, KV(b, 2, s, d, seed, DType::kF32), KV(b, 2, s, d, seed + 1, DType::kBF16));
  };
}

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_CACHE_TESTUTIL_H_
