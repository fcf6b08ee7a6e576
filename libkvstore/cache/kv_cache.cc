// KVCache: mlx-lm's growing attention cache (spec §2).
#include "kvstore/kv_cache.h"

#include "kvstore/mask.h"
#include "kvstore/quantized_kv_cache.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/cow_buffer.h"
#include "libkvstore/cache/quantized_buffers.h"

namespace kvstore {

struct KVCache::Buffers {
  CowBuffer keys;
  CowBuffer values;
};

namespace {
constexpr std::string_view kName = "KVCache";

// A zero block of `rows` positions shaped like `like` (B, H, *, D).
Array ZeroBlock(const Array& like, int64_t rows) {
  return Array::Zeros(like.dtype(), {like.dim(0), like.dim(1), rows, like.dim(3)});
}

// mlx-lm's growth: cut to `prev` when it is not step-aligned, then append a
// zero block of n*step rows.
Array Grow(const Array& buffer, int64_t prev, const Array& like, int64_t rows) {
  Array kept = prev % KVCache::kStep != 0 ? buffer.Slice(2, 0, prev) : buffer;
  const Array parts[] = {kept, ZeroBlock(like, rows)};
  return Array::Concatenate(parts, 2);
}
}  // namespace

std::unique_ptr<Cache> KVCache::Copy() const {
  auto copy = std::make_unique<KVCache>();
  if (buffers_) copy->buffers_ = std::make_shared<Buffers>(*buffers_);
  copy->offset_ = offset_;
  return copy;
}

bool KVCache::Empty() const { return buffers_ == nullptr; }

const Array& KVCache::keys_buffer() const {
  static const Array kUndefined;
  return buffers_ ? buffers_->keys.array() : kUndefined;
}
const Array& KVCache::values_buffer() const {
  static const Array kUndefined;
  return buffers_ ? buffers_->values.array() : kUndefined;
}

Result<KeysValues> KVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(kName, keys, values));
  const int64_t prev = offset_;
  const int64_t s = keys.dim(2);
  if (buffers_ != nullptr) {
    const Array& kb = buffers_->keys.array();
    const Array& vb = buffers_->values.array();
    if (kb.dim(0) != keys.dim(0) || kb.dim(1) != keys.dim(1) || kb.dim(3) != keys.dim(3) ||
        vb.dim(3) != values.dim(3)) {
      return Status::InvalidArgument("KVCache: update " + keys.Describe() + " / " +
                                     values.Describe() + " does not fit the cached " +
                                     kb.Describe() + " / " + vb.Describe());
    }
  }
  if (buffers_ == nullptr || prev + s > buffers_->keys.array().dim(2)) {
    const int64_t rows = (s + kStep - 1) / kStep * kStep;
    if (buffers_ == nullptr) {
      buffers_ = std::make_shared<Buffers>();
      buffers_->keys.Reset(ZeroBlock(keys, rows));
      buffers_->values.Reset(ZeroBlock(values, rows));
    } else {
      buffers_->keys.Reset(Grow(buffers_->keys.array(), prev, keys, rows));
      buffers_->values.Reset(Grow(buffers_->values.array(), prev, values, rows));
    }
  }
  // Python's slice assignment casts to the buffer's dtype.
  Array k = keys, v = values;
  if (k.dtype() != buffers_->keys.array().dtype()) {
    KV_ASSIGN_OR_RETURN(k, keys.AsType(buffers_->keys.array().dtype()));
  }
  if (v.dtype() != buffers_->values.array().dtype()) {
    KV_ASSIGN_OR_RETURN(v, values.AsType(buffers_->values.array().dtype()));
  }
  KV_RETURN_IF_ERROR(buffers_->keys.Write(2, prev, k));
  KV_RETURN_IF_ERROR(buffers_->values.Write(2, prev, v));
  offset_ = prev + s;
  return KeysValues{buffers_->keys.array().Slice(2, 0, offset_),
                    buffers_->values.array().Slice(2, 0, offset_)};
}

Result<CacheState> KVCache::State() const {
  if (buffers_ == nullptr) {
    return Status::FailedPrecondition("KVCache: an empty cache has no state");
  }
  if (offset_ == buffers_->keys.array().dim(2)) {
    return CacheState({buffers_->keys.Snapshot(), buffers_->values.Snapshot()});
  }
  return CacheState(
      {buffers_->keys.Snapshot(2, 0, offset_), buffers_->values.Snapshot(2, 0, offset_)});
}

Status KVCache::SetState(const CacheState& state) {
  KV_RETURN_IF_ERROR(CheckKeysValuesState(kName, state));
  auto buffers = std::make_shared<Buffers>();
  buffers->keys.Reset(state[0].array());
  buffers->values.Reset(state[1].array());
  buffers_ = std::move(buffers);
  offset_ = state[0].array().dim(2);
  return Status::OK();
}

Result<int64_t> KVCache::Nbytes() const {
  if (buffers_ == nullptr) return int64_t{0};
  return static_cast<int64_t>(buffers_->keys.array().nbytes() + buffers_->values.array().nbytes());
}

Result<int64_t> KVCache::Trim(int64_t n) {
  if (n < 0) return Status::InvalidArgument("KVCache: trim by a negative count");
  const int64_t trimmed = std::min(offset_, n);
  offset_ -= trimmed;
  return trimmed;
}

Result<Mask> KVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  return CreateAttentionMask(n, offset_, options.return_array, options.window_size);
}

Result<std::unique_ptr<QuantizedKVCache>> KVCache::ToQuantized(
    int group_size, int bits, QuantizeOptions::Rounding rounding) const {
  auto q = std::make_unique<QuantizedKVCache>(group_size, bits, rounding);
  q->offset_ = offset_;
  if (buffers_ != nullptr) {
    QuantizeOptions options{group_size, bits, rounding};
    KV_ASSIGN_OR_RETURN(QuantizedArray k, Quantize(buffers_->keys.array(), options));
    KV_ASSIGN_OR_RETURN(QuantizedArray v, Quantize(buffers_->values.array(), options));
    q->buffers_ = MakeQuantizedBuffers(std::move(k), std::move(v));
  }
  return q;
}

// ---- ConcatenateKVCache (spec §3) ----

std::unique_ptr<Cache> ConcatenateKVCache::Copy() const {
  auto copy = std::make_unique<ConcatenateKVCache>(*this);  // arrays are immutable values here
  return copy;
}

Result<KeysValues> ConcatenateKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate("ConcatenateKVCache", keys, values));
  if (!keys_.defined()) {
    keys_ = keys;
    values_ = values;
  } else {
    if (keys_.dim(0) != keys.dim(0) || keys_.dim(1) != keys.dim(1) || keys_.dim(3) != keys.dim(3) ||
        values_.dim(3) != values.dim(3) || keys_.dtype() != keys.dtype() ||
        values_.dtype() != values.dtype()) {
      return Status::InvalidArgument("ConcatenateKVCache: update " + keys.Describe() +
                                     " does not fit the cached " + keys_.Describe());
    }
    const Array k[] = {keys_, keys};
    const Array v[] = {values_, values};
    keys_ = Array::Concatenate(k, 2);
    values_ = Array::Concatenate(v, 2);
  }
  offset_ = keys_.dim(2);
  return KeysValues{keys_, values_};
}

Result<CacheState> ConcatenateKVCache::State() const {
  // Upstream returns (None, None) when empty (saving that then fails).
  if (!keys_.defined()) return CacheState({CacheState::None(), CacheState::None()});
  return CacheState({keys_, values_});
}

Status ConcatenateKVCache::SetState(const CacheState& state) {
  KV_RETURN_IF_ERROR(CheckKeysValuesState("ConcatenateKVCache", state));
  keys_ = state[0].array();
  values_ = state[1].array();
  offset_ = keys_.dim(2);
  return Status::OK();
}

Result<int64_t> ConcatenateKVCache::Nbytes() const {
  if (!keys_.defined()) return int64_t{0};
  return static_cast<int64_t>(keys_.nbytes() + values_.nbytes());
}

Result<int64_t> ConcatenateKVCache::Trim(int64_t n) {
  if (n < 0) return Status::InvalidArgument("ConcatenateKVCache: trim by a negative count");
  const int64_t trimmed = std::min(offset_, n);
  offset_ -= trimmed;  // cosmetic, as upstream (docs/compat.md)
  return trimmed;
}

Result<Mask> ConcatenateKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  return CreateAttentionMask(n, offset_, options.return_array, options.window_size);
}

}  // namespace kvstore
