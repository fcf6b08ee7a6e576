// What BatchKVCache and BatchRotatingKVCache share, as mlx-lm's two batch
// caches do: per-row int32 vectors (offset, left_padding), the state layout
// [keys, values, offset, left_padding], the checks and steps of update,
// prepare, filter, extract and extend, merge of single caches, and
// mlx-lm's dynamic_roll. Each check runs before its step changes anything.
#ifndef KVSTORE_LIBKVSTORE_CACHE_BATCH_UTIL_H_
#define KVSTORE_LIBKVSTORE_CACHE_BATCH_UTIL_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/cache.h"
#include "libkvstore/cache/kv_buffers.h"

namespace kvstore {

// Row b of the result is row b of x rolled right by shifts[b] along axis 2.
// REQUIRES: shifts.size() == x.dim(0).
Array DynamicRoll(const Array& x, const std::vector<int32_t>& shifts);

// A 1-D integer array as int32 values; errors name `cls` and `what`.
Result<std::vector<int32_t>> Int32Values(std::string_view cls, std::string_view what,
                                         const Array& a);

// Adds `delta` to every entry.
void AddToEach(std::vector<int32_t>& v, int64_t delta);

// KVBuffers::CheckUpdate plus one update row per batch row.
Status CheckBatchUpdate(std::string_view cls, const KVBuffers& buffers, size_t rows,
                        const Array& keys, const Array& values);

// FailedPrecondition unless a pending per-row vector (right padding,
// lengths) still has one entry per row; Filter and Extend do not adjust it.
Status CheckPending(std::string_view cls, std::string_view what,
                    const std::vector<int32_t>& pending, size_t rows);

// FailedPrecondition unless offset (and left_padding, of the same length)
// has one entry per batch row of the buffers. mlx-lm saves and loads a cache
// whose per-row vectors have another length (one built for n rows and
// updated with m), so SetState accepts it; the operations that work per row
// refuse it.
Status CheckRowsAgree(std::string_view cls, const KVBuffers& buffers, size_t rows);

// ---- state ----
struct BatchState {
  Array keys;
  Array values;
  std::vector<int32_t> offset;
  std::vector<int32_t> left_padding;
};
// Validates [keys, values, offset, left_padding]: offset and left_padding
// are 1-D integer arrays of one length (not necessarily the batch size).
Result<BatchState> ParseBatchState(std::string_view cls, const CacheState& state);
// mlx-lm 0.32's state starts with [keys, values, offset, left_padding]: as
// ParseBatchState, except that keys and values are the whole buffers and may
// both be None (an empty cache; `keys`, `values` undefined). REQUIRES: at
// least four entries.
Result<BatchState> ParseBatchFullState(std::string_view cls, const CacheState& state);
// [keys, values, offset, left_padding] of mlx-lm 0.32 (whole buffers).
CacheState::List MakeBatchFullState(const KVBuffers& buffers, const std::vector<int32_t>& offset,
                                    const std::vector<int32_t>& left_padding);
// [keys[..., :stop, :], values[..., :stop, :], offset, left_padding].
Result<CacheState> MakeBatchState(std::string_view cls, const KVBuffers& buffers, int64_t stop,
                                  const std::vector<int32_t>& offset,
                                  const std::vector<int32_t>& left_padding);

// ---- prepare ----
// prepare(left_padding=...): only on an empty cache, one entry per row.
Status CheckLeftPadding(std::string_view cls, const PrepareArgs& args, bool empty, size_t rows);
// Adds args.left_padding (when given) to left_padding and subtracts it from offset.
void ApplyLeftPadding(const PrepareArgs& args, std::vector<int32_t>& offset,
                      std::vector<int32_t>& left_padding);
// right_padding given with a positive entry (mlx-lm's `max(right_padding) > 0`).
bool HasRightPadding(const PrepareArgs& args);

// ---- filter and extract ----
// Every index in [0, rows).
Status CheckBatchIndices(std::string_view cls, std::span<const int64_t> indices, size_t rows);
std::vector<int32_t> TakeRows(const std::vector<int32_t>& v, std::span<const int64_t> indices);
// `index` (negative counts from the end) as a row in [0, rows).
Result<int64_t> BatchRow(std::string_view cls, int64_t index, size_t rows);

// ---- extend ----
// One side of an extend: its buffers (undefined when empty), write position
// and per-row vectors.
struct BatchSide {
  Array keys;
  Array values;
  int64_t idx = 0;
  const std::vector<int32_t>& offset;
  const std::vector<int32_t>& left_padding;
};
struct ExtendedBatch {
  Array keys;  // undefined when both sides were empty
  Array values;
  std::vector<int32_t> offset;
  std::vector<int32_t> left_padding;
  int64_t idx = 0;
};
// mlx-lm's extend: right-justify both sides to the larger write position,
// pad with zero rows (an empty side is an F32 placeholder, so the result
// promotes as upstream) and concatenate along the batch axis. Two empty
// sides only concatenate their vectors.
Result<ExtendedBatch> ExtendBatches(std::string_view cls, const BatchSide& a, const BatchSide& b);

// ---- merge ----
// The caches as T, or InvalidArgument naming the first that is not one.
template <typename T>
Result<std::vector<const T*>> Downcast(std::string_view cls, std::string_view want,
                                       std::span<const Cache* const> caches) {
  std::vector<const T*> out;
  for (const Cache* c : caches) {
    const T* t = dynamic_cast<const T*>(c);
    if (t == nullptr) {
      return Status::InvalidArgument(std::string(cls) + ": merge needs " + std::string(want) +
                                     " inputs, got " + std::string(c->class_name()));
    }
    out.push_back(t);
  }
  return out;
}

struct MergedBatch {
  Array keys;  // [n, H, length, Dk]; undefined when length == 0
  Array values;
  std::vector<int32_t> padding;
  int64_t length = 0;
};
// mlx-lm's merge: each input's rows (exactly its valid rows in temporal
// order, [1, H, len, D]; undefined keys for a cache without buffers) left-
// padded to the longest. Keys and values take the first buffered input's
// keys dtype, and every input is cast to it (slice assignment), as upstream.
Result<MergedBatch> MergeBatch(std::string_view cls, std::span<const KeysValues> rows);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_BATCH_UTIL_H_
