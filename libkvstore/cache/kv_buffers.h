// KVBuffers: the keys/values buffer pair of the attention caches (KVCache,
// ConcatenateKVCache, ChunkedKVCache, RotatingKVCache and the two batch
// caches): keys [B, H, rows, Dk] and values [B, H, rows, Dv] along the
// sequence axis 2, copy-on-write shared with snapshots (cow_buffer.h); and
// QuantizedKVCache's six buffers.
//
// The dtype rules are MLX's: a write into an existing buffer casts to the
// buffer's dtype (slice assignment), growing or concatenating promotes
// (F16 + BF16 -> F32). Every mutating member either succeeds or leaves the
// buffers as they were.
#ifndef KVSTORE_LIBKVSTORE_CACHE_KV_BUFFERS_H_
#define KVSTORE_LIBKVSTORE_CACHE_KV_BUFFERS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string_view>

#include "kvstore/cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "libkvstore/cache/cow_buffer.h"

namespace kvstore {

// mlx-lm's allocation step of the growing buffers, in positions.
inline constexpr int64_t kKVStep = 256;

// `n` rounded up to a multiple of kKVStep.
inline int64_t StepRows(int64_t n) { return (n + kKVStep - 1) / kKVStep * kKVStep; }

// MLX's promotion of two float dtypes (F16 + BF16 -> F32).
DType PromoteFloat(DType a, DType b);

// Concatenation along the sequence axis with MLX's float promotion.
// REQUIRES: equal or floating dtypes; equal dims other than axis 2.
Array ConcatRows(std::initializer_list<Array> parts);

// A zero block [B, H, rows, D] shaped and typed like `like`.
Array ZeroRows(const Array& like, int64_t rows);

// mlx-lm's growth of a stepped buffer: cut to `at` rows when `at` is not a
// multiple of kKVStep, then append `zeros` (promoting as ConcatRows).
Array GrowRows(const Array& buffer, int64_t at, const Array& zeros);

class KVBuffers {
 public:
  bool empty() const { return !keys_.defined(); }
  // The buffers, spare capacity included; undefined when empty.
  const Array& keys() const { return keys_.array(); }
  const Array& values() const { return values_.array(); }
  // Positions along axis 2 (0 when empty).
  int64_t rows() const { return empty() ? 0 : keys().dim(2); }
  // Bytes held, spare capacity included.
  int64_t nbytes() const;

  // An update's keys/values: CheckKeysValuesUpdate, then the cached batch,
  // heads and head dims once the buffers exist. Errors name `cls`.
  Status CheckUpdate(std::string_view cls, const Array& keys, const Array& values) const;

  // mlx-lm KVCache's update: writes the S positions of keys/values at rows
  // [at, at + S), first growing empty or short buffers by GrowRows with
  // StepRows(S) zero rows. FailedPrecondition when `at` lies outside the
  // buffers; InvalidArgument from CheckUpdate.
  Status WriteGrowing(std::string_view cls, int64_t at, const Array& keys, const Array& values);

  // Writes keys/values at rows [at, at + S) cast to the buffers' dtypes,
  // with Python's slice semantics (a negative `at` counts from the end, rows
  // past the end are dropped). REQUIRES: CheckUpdate passed, !empty().
  void WriteAt(int64_t at, const Array& keys, const Array& values);

  // Fetch views of rows [0, stop), stop clamped to [0, rows()].
  KeysValues Fetch(int64_t stop) const;
  // Snapshots [keys[..., :stop, :], values[..., :stop, :]] as mlx-lm's
  // state: the whole buffers when stop >= rows(). FailedPrecondition naming
  // `cls` when empty.
  Result<CacheState> State(std::string_view cls, int64_t stop) const;

  // Restores a [keys, values] state (CheckKeysValuesState); on error the
  // buffers are unchanged.
  Status Restore(std::string_view cls, const CacheState& state);

  // mlx-lm 0.32's keys and values: snapshots of the whole buffers (spare
  // rows included), or None and None when empty.
  CacheState FullKeys() const;
  CacheState FullValues() const;
  // Restores that pair: two arrays (as Restore) or two Nones (empty).
  Status RestoreFull(std::string_view cls, const CacheState& keys, const CacheState& values);
  // Replaces both buffers.
  void Reset(Array keys, Array values);
  // Replaces each buffer by f(buffer), e.g. a batch filter or roll.
  // REQUIRES: !empty().
  void Map(const std::function<Array(const Array&)>& f);

 private:
  CowBuffer keys_;
  CowBuffer values_;
};

// The buffers of a QuantizedKVCache: six copy-on-write arrays (packed,
// scales, biases for keys and for values). Shared with KVCache::ToQuantized.
struct QuantizedKVCache::Buffers {
  std::array<CowBuffer, 3> keys;    // packed, scales, biases
  std::array<CowBuffer, 3> values;
};

std::shared_ptr<QuantizedKVCache::Buffers> MakeQuantizedBuffers(QuantizedArray keys, QuantizedArray values);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_KV_BUFFERS_H_
