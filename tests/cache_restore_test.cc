// Restores are transactional and hostile-input safe; snapshots have value
// semantics; decode appends write in place.
#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "cache_testutil.h"
#include "libkvstore/integrity/sha256.h"

namespace kvstore::testing {
namespace {

void ExpectRejectedUnchanged(Cache& c, const CacheState& state, std::string_view msg) {
  const std::string before = Fingerprint(c);
  EXPECT_THAT(c.SetState(state), HasCode(StatusCode::kInvalidArgument, msg));
  EXPECT_EQ(Fingerprint(c), before);
}

void ExpectMetaRejectedUnchanged(Cache& c, const MetaState& meta, std::string_view msg) {
  const std::string before = Fingerprint(c);
  EXPECT_THAT(c.SetMetaState(meta), HasCode(StatusCode::kInvalidArgument, msg)) << meta.DebugString();
  EXPECT_EQ(Fingerprint(c), before);
}

TEST(CacheRestoreTest, AttentionCachesRejectBadStatesUnchanged) {
  std::vector<std::unique_ptr<Cache>> caches;
  caches.push_back(std::make_unique<KVCache>());
  caches.push_back(std::make_unique<RotatingKVCache>(8, 2));
  caches.push_back(std::make_unique<ChunkedKVCache>(16));
  caches.push_back(std::make_unique<ConcatenateKVCache>());
  for (auto& c : caches) {
    SCOPED_TRACE(std::string(c->class_name()));
    ASSERT_OK(c->UpdateAndFetch(KV(1, 2, 5, 8, 1), KV(1, 2, 5, 8, 2)));
    ExpectRejectedUnchanged(*c, CacheState({KV(1, 2, 5, 8, 3)}), "2 arrays");
    ExpectRejectedUnchanged(*c, CacheState({Array::Zeros(DType::kF16, {2, 5, 8}), KV(1, 2, 5, 8, 3)}), "rank 4");
    ExpectRejectedUnchanged(*c, CacheState({KV(1, 2, 5, 8, 3), KV(2, 2, 5, 8, 3)}), "disagree");
    ExpectRejectedUnchanged(*c, CacheState({Array::Zeros(DType::kI32, {1, 2, 5, 8}), KV(1, 2, 5, 8, 3)}), "F16, BF16");
    ExpectRejectedUnchanged(*c, CacheState({CacheState::None(), KV(1, 2, 5, 8, 3)}), "arrays");
    ExpectRejectedUnchanged(*c, CacheState::None(), "");
  }
}

TEST(CacheRestoreTest, MetaStatesRejectHostileValuesUnchanged) {
  RotatingKVCache rot(8, 2);
  ASSERT_OK(rot.UpdateAndFetch(KV(1, 2, 5, 8, 1), KV(1, 2, 5, 8, 2)));
  ExpectMetaRejectedUnchanged(rot, MetaState::Strings({"2", "8", "5"}), "[keep, max_size, offset, _idx]");
  ExpectMetaRejectedUnchanged(rot, MetaState::Strings({"2", "8", "5", "x"}), "_idx");
  ExpectMetaRejectedUnchanged(rot, MetaState::Strings({"2", "8", "5", "99999999999999999999"}), "not an integer");
  ExpectMetaRejectedUnchanged(rot, MetaState::Strings({"9", "8", "5", "5"}), "keep");
  ExpectMetaRejectedUnchanged(rot, MetaState::Strings({"2", "8", "-1", "5"}), "out of range");
  ExpectMetaRejectedUnchanged(rot, MetaState::Strings({"2", "8", "5", "6"}), "out of range");
  ExpectMetaRejectedUnchanged(rot, MetaState(""), "[keep");
  EXPECT_OK(rot.SetMetaState(MetaState::Strings({" 2", "+8", "5", "5 "})));  // Python int() forms

  QuantizedKVCache q(64, 4);
  ASSERT_OK(q.UpdateAndFetchQuantized(KV(1, 2, 3, 64, 1), KV(1, 2, 3, 64, 2)));
  ExpectMetaRejectedUnchanged(q, MetaState::Strings({"3", "64", "7"}), "not supported");
  ExpectMetaRejectedUnchanged(q, MetaState::Strings({"3", "48", "4"}), "not supported");
  ExpectMetaRejectedUnchanged(q, MetaState::Strings({"300", "64", "4"}), "offset");
  ExpectMetaRejectedUnchanged(q, MetaState::Strings({"3", "32", "4"}), "packed width");

  ChunkedKVCache ch(4);
  ASSERT_OK(ch.UpdateAndFetch(KV(1, 2, 5, 8, 1), KV(1, 2, 5, 8, 2)));
  ExpectMetaRejectedUnchanged(ch, MetaState::Strings({"0", "0"}), "chunk_size >= 1");
  ExpectMetaRejectedUnchanged(ch, MetaState::Strings({"None", "0"}), "not an integer");

  KVCache kv;
  ExpectMetaRejectedUnchanged(kv, MetaState::Strings({""}), "no meta state");
}

// mlx-lm saves and loads a batch cache built for 2 rows and updated with 4
// (its own tests do): the state restores and round-trips unchanged, and every
// per-row operation refuses it without changing it.
TEST(CacheRestoreTest, BatchStatesWithPerRowVectorsOfAnotherLengthRestoreButDoNotOperate) {
  const CacheState state({KV(4, 4, 7, 4, 1), KV(4, 4, 7, 4, 2), Array::FromInt32s({6, 5}), Array::FromInt32s({1, 2})});
  std::vector<std::unique_ptr<Cache>> caches;
  caches.push_back(std::make_unique<BatchKVCache>(std::vector<int32_t>{1, 2}));
  caches.push_back(std::make_unique<BatchRotatingKVCache>(10, std::vector<int32_t>{1, 2}));
  for (auto& c : caches) {
    SCOPED_TRACE(std::string(c->class_name()));
    ASSERT_OK(c->SetState(state));
    if (c->class_name() == "BatchRotatingKVCache") {
      ASSERT_OK(c->SetMetaState(MetaState::Strings({"10", "7", "7", "False"})));
    }
    ASSERT_OK_AND_ASSIGN(CacheState back, c->State());
    ASSERT_EQ(back.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(back[i].array().Describe(), state[i].array().Describe()) << i;
      EXPECT_EQ(Sha256(back[i].array()).ToHex(), Sha256(state[i].array()).ToHex()) << i;
    }
    const std::string before = Fingerprint(*c);
    const std::string rule = "offset and left_padding have 2 entries for 4 batch rows";
    EXPECT_THAT(c->UpdateAndFetch(KV(4, 4, 1, 4, 3), KV(4, 4, 1, 4, 3)), HasCode(StatusCode::kFailedPrecondition, rule));
    EXPECT_THAT(c->MakeMask(1, {}), HasCode(StatusCode::kFailedPrecondition, rule));
    EXPECT_THAT(c->Prepare({}), HasCode(StatusCode::kFailedPrecondition, rule));
    const int64_t rows[] = {0, 1};
    EXPECT_THAT(c->Filter(rows), HasCode(StatusCode::kFailedPrecondition, rule));
    EXPECT_THAT(c->Extract(0), HasCode(StatusCode::kFailedPrecondition, rule));
    std::unique_ptr<Cache> other = c->Copy();
    EXPECT_THAT(c->Extend(*other), HasCode(StatusCode::kFailedPrecondition, rule));
    EXPECT_EQ(Fingerprint(*c), before);
    EXPECT_OK(c->CheckSavedState());
    // Saved and loaded unchanged (validation accepts it).
    std::unique_ptr<Env> env = NewMemEnv();
    ASSERT_OK(SavePromptCache(env.get(), "/b", {std::shared_ptr<Cache>(c->Copy())}, {}));
    ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(env.get(), "/b"));
    ASSERT_OK_AND_ASSIGN(CacheState reloaded, loaded.cache[0]->State());
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(Sha256(reloaded[i].array()).ToHex(), Sha256(state[i].array()).ToHex()) << i;
    ASSERT_OK_AND_ASSIGN(int64_t trimmed, c->Trim(2));  // per batch, not per row
    EXPECT_EQ(trimmed, 2);
  }
}

TEST(CacheRestoreTest, BatchAndArraysCachesRejectBadStates) {
  BatchKVCache b({1, 0});
  ASSERT_OK(b.UpdateAndFetch(KV(2, 2, 3, 8, 1), KV(2, 2, 3, 8, 2)));
  ExpectRejectedUnchanged(b, CacheState({KV(2, 2, 3, 8, 1), KV(2, 2, 3, 8, 1), Array::FromInt32s({1}),
                                         Array::FromInt32s({1, 0})}),
                          "must have one length, got 1 and 2");
  ExpectRejectedUnchanged(b, CacheState({KV(2, 2, 3, 8, 1), KV(2, 2, 3, 8, 1),
                                         Array::Zeros(DType::kF32, {2}), Array::FromInt32s({1, 0})}),
                          "integer");
  BatchRotatingKVCache br(8, {0});
  ASSERT_OK(br.UpdateAndFetch(KV(1, 2, 3, 8, 1), KV(1, 2, 3, 8, 2)));
  ExpectMetaRejectedUnchanged(br, MetaState::Strings({"0", "3", "3", "False"}), "out of range");

  ArraysCache a(2);
  ASSERT_OK(a.SetSlot(0, Array::Zeros(DType::kF32, {1, 4})));
  CacheState::List too_many(ArraysCache::kMaxSlots + 1, CacheState::None());
  ExpectRejectedUnchanged(a, CacheState({CacheState(too_many), Array::Zeros(DType::kF32, {0}),
                                         Array::Zeros(DType::kF32, {0})}),
                          "exceed the limit");
  ExpectRejectedUnchanged(a, CacheState({Array::Zeros(DType::kF32, {1, 4})}), "3 entries");
  ExpectRejectedUnchanged(a, CacheState({CacheState::List{}, Array::Zeros(DType::kF32, {2, 2}),
                                         Array::Zeros(DType::kF32, {0})}),
                          "1-D");
}

TEST(CacheRestoreTest, CacheFromStateNamesUnknownClassesAndChildren) {
  EXPECT_THAT(CacheFromState("Nope", CacheState(), MetaState()), HasCode(StatusCode::kNotFound, "Nope"));
  const CacheState kv_state({KV(1, 1, 2, 4, 1), KV(1, 1, 2, 4, 2)});
  EXPECT_THAT(CacheFromState("CacheList", CacheState({kv_state}),
                             MetaState({MetaState::Strings({"KVCache", "KVCache"}), MetaState(MetaState::List{""})})),
              HasCode(StatusCode::kInvalidArgument, "2 classes"));
  EXPECT_THAT(CacheFromState("CacheList", CacheState({kv_state}),
                             MetaState({MetaState::Strings({"RotatingKVCache"}), MetaState({MetaState::Strings({"a"})})})),
              HasCode(StatusCode::kInvalidArgument, "child 0"));
  ASSERT_OK_AND_ASSIGN(auto list, CacheFromState("CacheList", CacheState({kv_state}),
                                                 MetaState({MetaState::Strings({"KVCache"}), MetaState(MetaState::List{""})})));
  EXPECT_EQ(list->class_name(), "CacheList");
  EXPECT_EQ(KnownCacheClasses().size(), 10u);
}

TEST(CacheSnapshotTest, StateAndCopyKeepTheirValuesAfterWrites) {
  KVCache kv;
  ASSERT_OK(kv.UpdateAndFetch(KV(1, 2, 4, 8, 1), KV(1, 2, 4, 8, 2)));
  ASSERT_OK_AND_ASSIGN(CacheState snapshot, kv.State());
  const std::string before = Sha256(snapshot[0].array()).ToHex();
  std::unique_ptr<Cache> copy = kv.Copy();
  const std::string copy_before = Fingerprint(*copy);
  ASSERT_OK(kv.Trim(2));
  ASSERT_OK(kv.UpdateAndFetch(KV(1, 2, 2, 8, 3), KV(1, 2, 2, 8, 4)));  // overwrites rows 2..3 in place
  EXPECT_EQ(Sha256(snapshot[0].array()).ToHex(), before);
  EXPECT_EQ(Fingerprint(*copy), copy_before);
}

TEST(CacheSnapshotTest, DecodeAppendsWriteInPlace) {
  KVCache kv;
  ASSERT_OK(kv.UpdateAndFetch(KV(1, 2, 10, 8, 1), KV(1, 2, 10, 8, 2)));
  const Array buffer = kv.keys_buffer();
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(kv.UpdateAndFetch(KV(1, 2, 1, 8, 10 + i), KV(1, 2, 1, 8, 20 + i)));
  }
  EXPECT_TRUE(kv.keys_buffer().SharesStorageWith(buffer));  // no copy within the 256 step
  EXPECT_EQ(kv.offset(), 110);
}

TEST(RotatingKVCacheTest, WrapKeepMultiTokenAndTrim) {
  // mlx-lm's RotatingKVCache (`mlx_lm/models/cache.py` _update_in_place,
  // _update_concat, _trim) traced by hand with max_size 8, keep 2 (tokens
  // tagged by value): wrap to keep, then a 3-token chunk trims the oldest.
  auto tok = [](float first, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i);
    return Array::FromValues<float>(DType::kF32, {1, 1, n, 1}, v);
  };
  auto rows = [](const Array& a) { return a.ToVector<float>(); };
  RotatingKVCache c(8, 2);
  ASSERT_OK(c.UpdateAndFetch(tok(1, 5), tok(1, 5)));
  EXPECT_TRUE(c.IsTrimmable());
  ASSERT_OK_AND_ASSIGN(int64_t t, c.Trim(1));  // before the wrap: trimmable
  EXPECT_EQ(t, 1);
  ASSERT_OK(c.UpdateAndFetch(tok(5, 1), tok(5, 1)));
  for (float x : {6.0f, 7.0f, 8.0f, 9.0f}) ASSERT_OK(c.UpdateAndFetch(tok(x, 1), tok(x, 1)));
  EXPECT_EQ(rows(c.keys_buffer()), (std::vector<float>{1, 2, 9, 4, 5, 6, 7, 8}));
  EXPECT_EQ(c.idx(), 3);
  EXPECT_FALSE(c.IsTrimmable());
  for (float x : {10.0f, 11.0f}) ASSERT_OK(c.UpdateAndFetch(tok(x, 1), tok(x, 1)));
  ASSERT_OK_AND_ASSIGN(KeysValues kv, c.UpdateAndFetch(tok(12, 3), tok(12, 3)));
  EXPECT_EQ(rows(kv.keys), (std::vector<float>{1, 2, 7, 8, 9, 10, 11, 12, 13, 14}));
  ASSERT_OK(c.UpdateAndFetch(tok(15, 1), tok(15, 1)));
  EXPECT_EQ(rows(c.keys_buffer()), (std::vector<float>{1, 2, 15, 10, 11, 12, 13, 14}));
  EXPECT_EQ(c.offset(), 15);
}

TEST(BatchCacheTest, MergeExtractRoundTrip) {
  std::vector<std::shared_ptr<KVCache>> singles;
  std::vector<const Cache*> raw;
  for (int i = 0; i < 3; ++i) {
    auto c = std::make_shared<KVCache>();
    ASSERT_OK(c->UpdateAndFetch(KV(1, 2, 3 + i, 8, 10 * i), KV(1, 2, 3 + i, 8, 10 * i + 1)));
    singles.push_back(c);
    raw.push_back(c.get());
  }
  ASSERT_OK_AND_ASSIGN(auto batch, BatchKVCache::Merge(raw));
  EXPECT_EQ(batch->left_padding().ToVector<int32_t>(), (std::vector<int32_t>{2, 1, 0}));
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto back, batch->Extract(i));
    EXPECT_EQ(StateFingerprint(*back), StateFingerprint(*singles[i])) << i;
  }
  EXPECT_THAT(batch->Extract(3), HasCode(StatusCode::kInvalidArgument, "out of range"));
  EXPECT_THAT(batch->Filter(std::vector<int64_t>{5}), HasCode(StatusCode::kInvalidArgument, "out of range"));
}

}  // namespace
}  // namespace kvstore::testing
