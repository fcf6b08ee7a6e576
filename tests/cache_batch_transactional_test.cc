// Batch operations (prepare, finalize, filter, extend) of the batch caches,
// ArraysCache / MambaCache and CacheList change nothing when they fail, and a
// CacheList whose second child fails leaves its first child untouched.
#include <memory>
#include <string>
#include <vector>

#include "cache_testutil.h"
#include "kvstore/arrays_cache.h"
#include "kvstore/batch_kv_cache.h"
#include "kvstore/batch_rotating_kv_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/kv_cache.h"

namespace kvstore::testing {
namespace {

using Rows = std::vector<int32_t>;

PrepareArgs Prep(std::optional<Rows> left, std::optional<Rows> lengths, std::optional<Rows> right) {
  PrepareArgs p;
  p.left_padding = std::move(left);
  p.lengths = std::move(lengths);
  p.right_padding = std::move(right);
  return p;
}

Mutation PrepareWith(PrepareArgs args) {
  return [=](Cache& c) { return c.Prepare(args); };
}
Mutation FilterTo(std::vector<int64_t> rows) {
  return [=](Cache& c) { return c.Filter(rows); };
}
Mutation TrimBy(int64_t n) {
  return [=](Cache& c) { return c.Trim(n).status(); };
}

// Extends with a fresh `make_other()`, which must itself stay unchanged when
// the extend fails (BatchRotatingKVCache reorders its argument on success).
Mutation ExtendWith(MakeCache make_other) {
  return [=](Cache& c) {
    std::unique_ptr<Cache> other = make_other();
    const std::string before = Fingerprint(*other);
    Status s = c.Extend(*other);
    if (!s.ok()) {
      EXPECT_EQ(Fingerprint(*other), before) << "the argument of a failed extend changed";
    }
    return s;
  };
}

MakeCache BatchKV() { return Filled<BatchKVCache>(2, 3, 8, Rows{1, 0}); }
MakeCache BatchRot() { return Filled<BatchRotatingKVCache>(2, 3, 8, int64_t{8}, Rows{1, 0}); }
MakeCache BatchRotRotated() {
  return Then(Filled<BatchRotatingKVCache>(2, 4, 8, int64_t{4}, Rows{0, 0}), UpdateOf(2, 1, 8, 5));
}
// One row with three heads: no two-head batch can be extended by it.
MakeCache ThreeHeads(MakeCache empty) {
  return Then(std::move(empty),
              [](Cache& c) { return Update(c, KV(1, 3, 3, 8, 6), KV(1, 3, 3, 8, 7)); });
}

// A batch of three rows whose pending right padding / lengths were given for
// two (prepared, updated, then extended by one row).
MakeCache StaleBatchKV() {
  return Then(Then(Then(
                       [] {
                         return std::make_unique<BatchKVCache>(Rows{0, 0});
                       },
                       PrepareWith(Prep(std::nullopt, std::nullopt, Rows{1, 0}))),
                   UpdateOf(2, 3, 8, 1)),
              ExtendWith(Filled<BatchKVCache>(1, 3, 8, Rows{0})));
}
MakeCache PendingBatchRot() {
  return Then(Then(
                  [] {
                    return std::make_unique<BatchRotatingKVCache>(8, Rows{0, 0});
                  },
                  PrepareWith(Prep(std::nullopt, Rows{2, 3}, Rows{1, 0}))),
              UpdateOf(2, 3, 8, 1));
}
MakeCache StaleBatchRot() {
  return Then(PendingBatchRot(),
              ExtendWith(Filled<BatchRotatingKVCache>(1, 3, 8, int64_t{8}, Rows{0})));
}

TEST(CacheBatchTransactionalTest, BatchCachesChangeNothingOnFailedBatchOperations) {
  struct Subject {
    std::string name;
    MakeCache make;
    MakeCache other_with_three_heads;
  };
  const std::vector<Subject> subjects = {
      {"BatchKVCache", BatchKV(),
       ThreeHeads([] { return std::make_unique<BatchKVCache>(Rows{0}); })},
      {"BatchRotatingKVCache", BatchRot(),
       ThreeHeads([] { return std::make_unique<BatchRotatingKVCache>(8, Rows{0}); })},
      {"BatchRotatingKVCache rotated", BatchRotRotated(),
       ThreeHeads([] { return std::make_unique<BatchRotatingKVCache>(4, Rows{0}); })},
  };
  for (const Subject& s : subjects) {
    const Mutation next = UpdateOf(2, 1, 8, 9);
    const auto fails = [&](const Mutation& op, const std::string& what) {
      ExpectFailsUnchanged(s.make, op, StatusCode::kInvalidArgument, next, s.name + ": " + what);
    };
    fails(PrepareWith(Prep(Rows{1, 1}, std::nullopt, std::nullopt)),
          "left padding on a filled cache");
    fails(FilterTo({2}), "filter index 2 of 2 rows");
    fails(FilterTo({0, -1}), "filter index -1");
    fails(ExtendWith([] { return std::make_unique<KVCache>(); }), "extend by a KVCache");
    fails(ExtendWith(s.other_with_three_heads), "extend by a batch with three heads");
  }
}

TEST(CacheBatchTransactionalTest, PrepareValidatesEverythingBeforeApplyingLeftPadding) {
  const MakeCache kv = [] { return std::make_unique<BatchKVCache>(Rows{1, 0}); };
  const MakeCache rot = [] { return std::make_unique<BatchRotatingKVCache>(8, Rows{1, 0}); };
  const Mutation next = UpdateOf(2, 3, 8, 9);
  for (const auto& [name, make] :
       {std::pair{"BatchKVCache", kv}, std::pair{"BatchRotatingKVCache", rot}}) {
    ExpectFailsUnchanged(make, PrepareWith(Prep(Rows{1}, std::nullopt, std::nullopt)),
                         StatusCode::kInvalidArgument, next,
                         std::string(name) + ": left padding of 1 row");
  }
  ExpectFailsUnchanged(kv, PrepareWith(Prep(Rows{1, 1}, std::nullopt, Rows{1})),
                       StatusCode::kInvalidArgument, next,
                       "BatchKVCache: right padding of 1 row after a good left padding");
  ExpectFailsUnchanged(
      rot, PrepareWith(Prep(Rows{1, 1}, std::nullopt, Rows{1, 0})), StatusCode::kInvalidArgument,
      next, "BatchRotatingKVCache: right padding without lengths after a good left padding");
}

TEST(CacheBatchTransactionalTest, StalePendingPaddingFailsBeforeAnyChange) {
  ExpectFailsUnchanged(
      StaleBatchKV(), [](Cache& c) { return c.Finalize(); }, StatusCode::kFailedPrecondition,
      TrimBy(1), "BatchKVCache: finalize with right padding for 2 of 3 rows");
  ExpectFailsUnchanged(
      StaleBatchRot(), [](Cache& c) { return c.Finalize(); }, StatusCode::kFailedPrecondition,
      TrimBy(1), "BatchRotatingKVCache: finalize with lengths for 2 of 3 rows");
  ExpectFailsUnchanged(StaleBatchRot(), UpdateOf(3, 2, 8, 4), StatusCode::kFailedPrecondition,
                       TrimBy(1), "BatchRotatingKVCache: prefill with lengths for 2 of 3 rows");
  ExpectFailsUnchanged(PendingBatchRot(), UpdateOf(2, 1, 8, 4), StatusCode::kFailedPrecondition,
                       TrimBy(1), "BatchRotatingKVCache: decode before finalize");
}

TEST(CacheBatchTransactionalTest, FilterOfAnEmptyBatchKVCacheKeepsItsPadding) {
  BatchKVCache c({2, 3});
  ASSERT_OK(c.Filter(std::vector<int64_t>{1}));
  EXPECT_EQ(c.left_padding().ToVector<int32_t>(), (std::vector<int32_t>{3}));
  EXPECT_EQ(c.idx(), 0);
  ASSERT_OK(c.UpdateAndFetch(KV(1, 2, 4, 8, 1), KV(1, 2, 4, 8, 2)));
  EXPECT_EQ(c.offsets().ToVector<int32_t>(), (std::vector<int32_t>{1}));
}

// Slots F16 [rows, 4] and F32 [rows, 3], lengths pending.
MakeCache Arrays(int64_t rows, bool mamba = false) {
  return [=]() -> std::unique_ptr<Cache> {
    std::unique_ptr<ArraysCache> a =
        mamba ? std::make_unique<MambaCache>() : std::make_unique<ArraysCache>(2);
    EXPECT_OK(a->SetSlot(0, RandomArray(DType::kF16, {rows, 4}, 1)));
    EXPECT_OK(a->SetSlot(1, RandomArray(DType::kF32, {rows, 3}, 2)));
    EXPECT_OK(a->Prepare(Prep(std::nullopt, Rows(static_cast<size_t>(rows), 3), std::nullopt)));
    return a;
  };
}

TEST(CacheBatchTransactionalTest, ArraysCachesChangeNothingOnFailure) {
  for (bool mamba : {false, true}) {
    const MakeCache make = Arrays(2, mamba);
    const std::string name = mamba ? "MambaCache: " : "ArraysCache: ";
    const Mutation next = FilterTo({1, 0});
    const auto fails = [&](const Mutation& op, StatusCode code, const std::string& what) {
      ExpectFailsUnchanged(make, op, code, next, name + what);
    };
    const auto invalid = StatusCode::kInvalidArgument;
    fails(
        [](Cache& c) {
          return static_cast<ArraysCache&>(c).SetSlot(2, Array::Zeros(DType::kF16, {2, 4}));
        },
        invalid, "slot 2 of 2");
    fails(FilterTo({2}), invalid, "filter index 2 of 2 rows");
    fails(ExtendWith([] { return std::make_unique<KVCache>(); }), invalid, "extend by a KVCache");
    fails(ExtendWith([] { return std::make_unique<ArraysCache>(3); }), invalid,
          "extend by 3 slots");
    fails(ExtendWith([] {
            auto o = std::make_unique<ArraysCache>(2);
            EXPECT_OK(o->SetSlot(0, Array::Zeros(DType::kF16, {1, 5})));
            return o;
          }),
          invalid, "extend by a slot of another width");
    fails(PrepareWith(Prep(std::nullopt, std::nullopt, std::nullopt)), invalid,
          "prepare without lengths");
    fails([](Cache& c) { return c.SetState(CacheState::None()); }, invalid, "state None");
    fails(
        [](Cache& c) {
          return static_cast<ArraysCache&>(c).SetLegacyState(Array::Zeros(DType::kF32, {1}));
        },
        invalid, "legacy state of an array");
    fails([](Cache& c) { return c.SetMetaState(MetaState::Strings({"x"})); }, invalid,
          "meta_state ['x']");
    fails(TrimBy(1), StatusCode::kNotSupported, "trim");
    fails([](Cache& c) { return c.UpdateAndFetch(KV(2, 2, 1, 8, 1), KV(2, 2, 1, 8, 2)).status(); },
          StatusCode::kNotSupported, "update_and_fetch");
  }
}

MakeCache ListOf(std::vector<MakeCache> children) {
  return [=]() -> std::unique_ptr<Cache> {
    std::vector<std::shared_ptr<Cache>> made;
    for (const MakeCache& m : children) made.push_back(m());
    return std::make_unique<CacheList>(std::move(made));
  };
}

TEST(CacheBatchTransactionalTest, CacheListFailuresLeaveEveryChildUntouched) {
  // The first child accepts each call below; the second refuses it.
  const MakeCache list = ListOf({Arrays(3), BatchKV()});
  const Mutation next = FilterTo({1, 0});
  const auto invalid = StatusCode::kInvalidArgument;
  ExpectFailsUnchanged(list, FilterTo({2}), invalid, next, "filter row 2");
  ExpectFailsUnchanged(list, PrepareWith(Prep(Rows{1, 1}, Rows{3, 1, 2}, std::nullopt)), invalid,
                       next, "prepare left padding of a filled batch");
  ExpectFailsUnchanged(list, ExtendWith(ListOf({Arrays(1), ThreeHeads([] {
                                                  return std::make_unique<BatchKVCache>(Rows{0});
                                                })})),
                       invalid, next, "extend by a batch with three heads");
  ExpectFailsUnchanged(list, ExtendWith([] { return std::make_unique<KVCache>(); }), invalid, next,
                       "extend by a KVCache");
  ExpectFailsUnchanged(
      list,
      [](Cache& c) {
        Result<CacheState> good = Arrays(3)()->State();
        if (!good.ok()) return good.status();
        return c.SetState(CacheState({*good, CacheState::None()}));
      },
      invalid, next, "state of a bad second child");
  ExpectFailsUnchanged(
      list,
      [](Cache& c) {
        return c.SetMetaState(MetaState({MetaState::List{}, MetaState({"", "x"})}));
      },
      invalid, next, "meta_state of a bad second child");
  ExpectFailsUnchanged(
      ListOf({Arrays(3), StaleBatchKV()}), [](Cache& c) { return c.Finalize(); },
      StatusCode::kFailedPrecondition, FilterTo({2, 1, 0}), "finalize with stale right padding");

  const Mutation decode_first_child = [](Cache& c) {
    return Update(*static_cast<CacheList&>(c).child(0), KV(1, 2, 1, 8, 9), KV(1, 2, 1, 8, 10));
  };
  ExpectFailsUnchanged(ListOf({Filled<KVCache>(1, 3, 8), Arrays(1)}), TrimBy(1),
                       StatusCode::kNotSupported, decode_first_child,
                       "trim with an ArraysCache child");
  ExpectFailsUnchanged(ListOf({Filled<KVCache>(1, 3, 8)}), TrimBy(-1), invalid, decode_first_child,
                       "trim by -1");
}

}  // namespace
}  // namespace kvstore::testing
