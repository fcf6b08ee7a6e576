// Cache: the common interface of every mlx-lm cache class.
//
// Names follow mlx-lm's cache.py in C++ spelling (update_and_fetch ->
// UpdateAndFetch, is_trimmable -> IsTrimmable, meta_state -> meta_state(),
// ...), with the same results and the same state / meta_state. A member that
// a Python class lacks (AttributeError there) returns NotSupported here;
// where Python raises ValueError/KeyError/RuntimeError we return
// InvalidArgument/NotFound/FailedPrecondition. Deliberate differences from
// mlx-lm are listed in docs/compat.md.
//
// Tensors: attention caches take keys [B, n_kv_heads, S, Dk] and values
// [B, n_kv_heads, S, Dv]; axis 2 is the sequence axis.
//
// Threads: a cache is single-writer. Const members may run concurrently
// from many threads as long as no mutating member runs at the same time.
// Different cache objects are independent.
//
// Views and snapshots:
//   * Arrays returned by UpdateAndFetch view the cache's buffer. They stay
//     valid (never dangle) and keep their contents until the next mutating
//     call on that cache (UpdateAndFetch, Trim, SetState, Filter, ...); after
//     that their contents are unspecified. Decode-step appends therefore cost
//     O(new tokens), not O(history).
//   * State() and Copy() are snapshots with value semantics, as in mlx-lm:
//     they share buffers with the cache (O(layers), no byte copy) and the
//     cache copies a buffer before its next write only while a snapshot
//     still holds it (copy-on-write).
//
// Every mutating call is transactional: when UpdateAndFetch, Trim,
// SetState, SetMetaState, Prepare, Finalize, Filter, Extend (or a class's
// own mutator) fails, the cache, and Extend's argument, are exactly as
// before, and the error names the class and the violated rule. Hostile
// states never crash, abort or allocate absurd amounts: sizes are checked
// before any allocation.
//
// Dtypes: keys and values must be floats (F16, BF16, F32, F64) and may differ
// from each other and from the cache's. As in MLX, a write into an existing
// buffer casts to the buffer's dtype; growing or concatenating a buffer
// promotes (F16 + BF16 -> F32).
#ifndef KVSTORE_CACHE_H_
#define KVSTORE_CACHE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/cache_spec.h"
#include "kvstore/cache_state.h"
#include "kvstore/status.h"

namespace kvstore {

struct KeysValues {
  Array keys;
  Array values;
};

// What make_mask / create_attention_mask return: Python None, the string
// "causal" (SDPA applies a lower-right causal mask), or a BOOL array where
// true means "may attend".
struct Mask {
  enum class Kind { kNone, kCausal, kArray };
  Kind kind = Kind::kNone;
  Array array;  // defined only for kArray

  static Mask None() { return Mask{}; }
  static Mask Causal() { return Mask{Kind::kCausal, Array()}; }
  static Mask FromArray(Array a) { return Mask{Kind::kArray, std::move(a)}; }
};

// Rows along the token axis held by a cache, by absolute position: row r
// of every array is token first + r. Attention classes: {keys, values},
// each [1, H, count, D]; QuantizedKVCache: {k_packed, k_scales, k_biases,
// v_packed, v_scales, v_biases}. The arrays are views (snapshots).
struct TokenRows {
  int64_t first = 0;
  int64_t count = 0;
  std::vector<Array> arrays;
};

struct MaskOptions {
  std::optional<int64_t> window_size;
  bool return_array = false;
};

// Arguments of the batch caches' prepare(); unset = Python None.
struct PrepareArgs {
  std::optional<std::vector<int32_t>> left_padding;
  std::optional<std::vector<int32_t>> lengths;
  std::optional<std::vector<int32_t>> right_padding;
};

class Cache {
 public:
  virtual ~Cache() = default;

  // The class name mlx-lm saves this cache under ("KVCache", ...).
  virtual std::string_view class_name() const = 0;

  // A deep copy with value semantics (copy.deepcopy in mlx-lm). Shares
  // buffers copy-on-write, so it costs O(layers) until either side writes.
  virtual std::unique_ptr<Cache> Copy() const = 0;

  // ---- Attention update ----
  // Appends S positions and returns the keys/values attention should use.
  // NotSupported for classes without update_and_fetch (ArraysCache,
  // CacheList) and for QuantizedKVCache (see UpdateAndFetchQuantized there).
  virtual Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values);

  // ---- Serialisable state ----
  // Errors where mlx-lm raises (e.g. the state of an empty KVCache).
  virtual Result<CacheState> State() const;
  virtual Status SetState(const CacheState& state);
  virtual MetaState meta_state() const;
  virtual Status SetMetaState(const MetaState& meta);
  // For a cache just restored from a saved state (CacheFromState): OK when
  // that state and meta_state are a pair mlx-lm's save_prompt_cache can
  // write, i.e. the class's invariants between its meta_state and the rows
  // it stores hold (docs/format.md §5.8, rules L16-L19). SetState and
  // SetMetaState accept more, as mlx-lm's from_state does; loading a file
  // refuses the rest (as Corruption). Else InvalidArgument naming the class
  // and the rule.
  virtual Status CheckSavedState() const { return Status::OK(); }

  // ---- mlx-lm 0.32's state (docs/format.md §5.9) ----
  // mlx-lm 0.32 dropped meta_state: its `state` holds the raw buffers (spare
  // rows, and rows past offset after a trim, included; None buffers when
  // empty) plus the scalars meta_state carried, in each class's own order,
  // and `from_state(state)` takes it alone. E.g. KVCache [keys, values,
  // offset], RotatingKVCache [keys, values, offset, keep, max_size, _idx],
  // CacheList [[child state, "ChildClass"], ...]. The defaults are State()
  // and SetState() (ConcatenateKVCache's state did not change). SetFullState
  // is transactional and checks what SetState and SetMetaState check.
  // Errors where mlx-lm 0.32 cannot save or load the state (an empty
  // ConcatenateKVCache).
  virtual Result<CacheState> FullState() const { return State(); }
  virtual Status SetFullState(const CacheState& state) { return SetState(state); }

  // ---- Sizes ----
  // The scalar offset (tokens seen), or nullopt for classes without one
  // (ArraysCache, CacheList) or with a per-sequence offset (batch caches).
  virtual std::optional<int64_t> offset() const { return std::nullopt; }
  virtual int64_t Size() const { return 0; }
  virtual bool Empty() const = 0;
  // Bytes held, spare capacity included (mlx-lm's nbytes).
  virtual Result<int64_t> Nbytes() const = 0;

  // ---- Trimming ----
  virtual bool IsTrimmable() const { return false; }
  // Removes up to n trailing positions; returns how many were removed.
  virtual Result<int64_t> Trim(int64_t n);

  // ---- Masks ----
  virtual Result<Mask> MakeMask(int64_t n, const MaskOptions& options) const;

  // ---- Batch operations (batch caches, ArraysCache, CacheList) ----
  virtual Status Prepare(const PrepareArgs& args);
  virtual Status Finalize();
  virtual Status Filter(std::span<const int64_t> batch_indices);
  // May reorder `other` too (BatchRotatingKVCache does, like mlx-lm).
  virtual Status Extend(Cache& other);
  virtual Result<std::unique_ptr<Cache>> Extract(int64_t index) const;

  // ---- What the prompt-reuse tiers ask (cache_spec.h) ----
  // These let code outside the cache classes fingerprint, chunk and
  // rebuild a cache without naming its class. Const members follow the
  // threading rule above; RestoreRows is a mutator (single writer).

  // Fills the fingerprint fields of `spec` (docs/format.md §8.1) that its
  // class has (FindCacheClass(class_name())); the caller sets
  // spec.class_name. The default reads [keys, values] or the slots from
  // State(); classes with parameters add them (quantization, window, chunk
  // size) and a CacheList describes its children. NotSupported when the
  // cache cannot tell its shapes (empty, a None slot, chunk size None) or
  // its class has no fingerprint rule.
  virtual Status DescribeSpec(CacheSpec& spec) const;

  // The rows this cache still holds along the token axis, all of them up to
  // offset(): KVCache and QuantizedKVCache from position 0, ChunkedKVCache
  // from its start_position, RotatingKVCache in temporal order only while
  // it has dropped none. nullopt when it holds no such rows (other classes,
  // an empty cache, a window that dropped rows).
  virtual std::optional<TokenRows> RowsByPosition() const { return std::nullopt; }

  // Sets the cache to hold exactly `rows` (as RowsByPosition returns them,
  // from position 0; offset = their row count) with the parameters of
  // `spec` (quantization, window, chunk size). REQUIRES: a freshly built
  // cache (CacheFromRows does this). NotSupported for classes without
  // rows; InvalidArgument, as SetState, for rows that do not fit.
  virtual Status RestoreRows(const CacheSpec& spec, std::span<const Array> rows);

  // A container's children (CacheList); empty for every other class.
  virtual std::span<const std::shared_ptr<Cache>> children() const { return {}; }

 protected:
  Cache() = default;
  Cache(const Cache&) = default;
  Cache& operator=(const Cache&) = default;

  // NotSupported("<class> has no <member>"), the AttributeError analogue.
  Status Unsupported(std::string_view member) const;
};

// The keys/values buffers of the attention caches (libkvstore internal).
class KVBuffers;

// One cache per model layer, as mlx-lm's prompt_cache list. Entries are
// shared: a CacheList or an LRU entry may hold the same cache object.
using PromptCache = std::vector<std::shared_ptr<Cache>>;

// Builds a cache of class `class_name` from mlx-lm 0.32's state
// (Cache::FullState), like 0.32's `Class.from_state(state)`. Errors as
// CacheFromState's.
Result<std::unique_ptr<Cache>> CacheFromFullState(std::string_view class_name, const CacheState& state);

// Builds a cache of class `class_name` from a state and meta state, like
// mlx-lm's `Class.from_state` (state first, then meta). Knows every class of
// this library plus "MambaCache" (a 2-slot ArraysCache). NotFound for an
// unknown class name; InvalidArgument naming the class and rule otherwise.
Result<std::unique_ptr<Cache>> CacheFromState(std::string_view class_name,
                                              const CacheState& state, const MetaState& meta);

// A fresh cache of class `class_name` holding `rows` (Cache::RestoreRows),
// e.g. a layer rebuilt from the shared tier's chunks. NotFound for an
// unknown class name; RestoreRows's errors otherwise.
Result<std::unique_ptr<Cache>> CacheFromRows(std::string_view class_name, const CacheSpec& spec,
                                             std::span<const Array> rows);

// The class names CacheFromState accepts.
std::span<const std::string_view> KnownCacheClasses();

}  // namespace kvstore

#endif  // KVSTORE_CACHE_H_
