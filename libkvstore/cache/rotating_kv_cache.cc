// RotatingKVCache: mlx-lm's sliding-window cache (spec §4).
#include "kvstore/rotating_kv_cache.h"

#include <string>

#include "kvstore/mask.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/batch_util.h"
#include "libkvstore/cache/cow_buffer.h"
#include "libkvstore/cache/py_slice.h"
#include "libkvstore/cache/rotating_order.h"

namespace kvstore {

struct RotatingKVCache::Buffers {
  CowBuffer keys;
  CowBuffer values;
};

namespace {
constexpr std::string_view kName = "RotatingKVCache";

// Concatenation along the sequence axis with MLX's dtype promotion.
Array Concat(std::initializer_list<Array> parts) {
  std::vector<Array> v(parts);
  DType d = v[0].dtype();
  for (const Array& a : v) d = PromoteFloat(d, a.dtype());
  for (Array& a : v) a = a.AsType(d).value();
  return Array::Concatenate(v, 2);
}
}  // namespace

RotatingKVCache::RotatingKVCache(int64_t max_size, int64_t keep) : max_size_(max_size), keep_(keep) {}

std::unique_ptr<Cache> RotatingKVCache::Copy() const {
  auto copy = std::make_unique<RotatingKVCache>(max_size_, keep_);
  copy->offset_ = offset_;
  copy->idx_ = idx_;
  if (buffers_) copy->buffers_ = std::make_shared<Buffers>(*buffers_);
  return copy;
}

const Array& RotatingKVCache::keys_buffer() const {
  static const Array kUndefined;
  return buffers_ ? buffers_->keys.array() : kUndefined;
}
const Array& RotatingKVCache::values_buffer() const {
  static const Array kUndefined;
  return buffers_ ? buffers_->values.array() : kUndefined;
}

bool RotatingKVCache::Empty() const { return buffers_ == nullptr; }
int64_t RotatingKVCache::Size() const { return std::min(offset_, max_size_); }

// _trim: v[:keep] ++ v[trim_size + keep:] (++ append).
static Array TrimRows(const Array& v, int64_t keep, int64_t trim_size, const Array* append) {
  Array out = v;
  if (trim_size > 0) out = Concat({PySlice(v, 2, std::nullopt, keep), PySlice(v, 2, trim_size + keep, std::nullopt)});
  if (append != nullptr) out = Concat({out, *append});
  return out;
}

// _temporal_order: the buffer in chronological order.
Array RotatingTemporalOrder(const Array& v, int64_t keep, int64_t idx, int64_t offset) {
  if (idx == v.dim(2)) return v;
  if (idx < offset) {
    return Concat({PySlice(v, 2, std::nullopt, keep), PySlice(v, 2, idx, std::nullopt),
                   PySlice(v, 2, keep, idx)});
  }
  return PySlice(v, 2, std::nullopt, idx);
}

Result<KeysValues> RotatingKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(kName, keys, values));
  if (buffers_ != nullptr) {
    const Array& kb = buffers_->keys.array();
    const Array& vb = buffers_->values.array();
    if (kb.dim(0) != keys.dim(0) || kb.dim(1) != keys.dim(1) || kb.dim(3) != keys.dim(3) ||
        vb.dim(3) != values.dim(3)) {
      return Status::InvalidArgument("RotatingKVCache: update " + keys.Describe() +
                                     " does not fit the cached " + kb.Describe());
    }
  }
  const int64_t s = keys.dim(2);
  if (s != 1) {
    // Concat path: the buffer in temporal order, oldest non-kept rows
    // dropped so that every new position still sees max_size - 1 others.
    if (buffers_ == nullptr) {
      buffers_ = std::make_shared<Buffers>();
      buffers_->keys.Reset(keys);
      buffers_->values.Reset(values);
    } else {
      Array k = RotatingTemporalOrder(buffers_->keys.array(), keep_, idx_, offset_);
      Array v = RotatingTemporalOrder(buffers_->values.array(), keep_, idx_, offset_);
      idx_ = k.dim(2);
      const int64_t trim_size = idx_ - max_size_ + 1;
      buffers_->keys.Reset(TrimRows(k, keep_, trim_size, &keys));
      buffers_->values.Reset(TrimRows(v, keep_, trim_size, &values));
    }
    offset_ += s;
    idx_ = buffers_->keys.array().dim(2);
    return KeysValues{buffers_->keys.array(), buffers_->values.array()};
  }

  // In-place path (one token).
  const int64_t prev = offset_;
  if (buffers_ == nullptr ||
      (prev >= buffers_->keys.array().dim(2) && buffers_->keys.array().dim(2) < max_size_)) {
    const int64_t new_size = std::min(kStep, max_size_ - prev);
    if (new_size < 0) {
      return Status::FailedPrecondition(
          "RotatingKVCache: offset " + std::to_string(prev) + " exceeds max_size " +
          std::to_string(max_size_) + " while the buffer holds fewer rows (upstream raises here)");
    }
    Array kz = Array::Zeros(keys.dtype(), {keys.dim(0), keys.dim(1), new_size, keys.dim(3)});
    Array vz = Array::Zeros(values.dtype(), {values.dim(0), values.dim(1), new_size, values.dim(3)});
    if (buffers_ == nullptr) {
      buffers_ = std::make_shared<Buffers>();
      buffers_->keys.Reset(kz);
      buffers_->values.Reset(vz);
    } else {
      buffers_->keys.Reset(Concat({buffers_->keys.array(), kz}));
      buffers_->values.Reset(Concat({buffers_->values.array(), vz}));
    }
    idx_ = prev;
  }
  const int64_t trim_size = buffers_->keys.array().dim(2) - max_size_;
  if (trim_size > 0) {
    buffers_->keys.Reset(TrimRows(buffers_->keys.array(), keep_, trim_size, nullptr));
    buffers_->values.Reset(TrimRows(buffers_->values.array(), keep_, trim_size, nullptr));
    idx_ = max_size_;
  }
  if (idx_ == max_size_) idx_ = keep_;
  // keys[..., idx:idx+1, :] = new, with Python's slice clamping: a write
  // past the end (keep == max_size) is dropped, as upstream.
  Array& kb = buffers_->keys.MutableArray();
  Array& vb = buffers_->values.MutableArray();
  Array kdst = PySlice(kb, 2, idx_, idx_ + s);
  Array vdst = PySlice(vb, 2, idx_, idx_ + s);
  if (kdst.dim(2) == s) {
    // Slice assignment casts to the buffer's dtype.
    KV_ASSIGN_OR_RETURN(Array k, keys.AsType(kb.dtype()));
    KV_ASSIGN_OR_RETURN(Array v, values.AsType(vb.dtype()));
    KV_RETURN_IF_ERROR(kdst.CopyFrom(k));
    KV_RETURN_IF_ERROR(vdst.CopyFrom(v));
  } else if (kdst.dim(2) != 0) {
    return Status::Internal("RotatingKVCache: partial in-place write");
  }
  offset_ += s;
  idx_ += s;
  if (offset_ < max_size_) {
    return KeysValues{PySlice(kb, 2, std::nullopt, offset_), PySlice(vb, 2, std::nullopt, offset_)};
  }
  return KeysValues{kb, vb};
}

Result<CacheState> RotatingKVCache::State() const {
  if (buffers_ == nullptr) {
    return Status::FailedPrecondition("RotatingKVCache: an empty cache has no state");
  }
  if (offset_ < buffers_->keys.array().dim(2)) {
    return CacheState({buffers_->keys.Snapshot(2, 0, offset_), buffers_->values.Snapshot(2, 0, offset_)});
  }
  return CacheState({buffers_->keys.Snapshot(), buffers_->values.Snapshot()});
}

Status RotatingKVCache::SetState(const CacheState& state) {
  KV_RETURN_IF_ERROR(CheckKeysValuesState(kName, state));
  auto buffers = std::make_shared<Buffers>();
  buffers->keys.Reset(state[0].array());
  buffers->values.Reset(state[1].array());
  buffers_ = std::move(buffers);
  return Status::OK();
}

MetaState RotatingKVCache::meta_state() const {
  return MetaState::Strings({std::to_string(keep_), std::to_string(max_size_),
                             std::to_string(offset_), std::to_string(idx_)});
}

Status RotatingKVCache::SetMetaState(const MetaState& meta) {
  if (!meta.is_list() || meta.size() != 4) {
    return Status::InvalidArgument("RotatingKVCache: meta_state must be [keep, max_size, offset, _idx]");
  }
  KV_ASSIGN_OR_RETURN(int64_t keep, ParseMetaInt(kName, "keep", meta[0]));
  KV_ASSIGN_OR_RETURN(int64_t max_size, ParseMetaInt(kName, "max_size", meta[1]));
  KV_ASSIGN_OR_RETURN(int64_t offset, ParseMetaInt(kName, "offset", meta[2]));
  KV_ASSIGN_OR_RETURN(int64_t idx, ParseMetaInt(kName, "_idx", meta[3]));
  if (max_size < 1 || keep < 0 || keep > max_size) {
    return Status::InvalidArgument("RotatingKVCache: meta_state needs max_size >= 1 and 0 <= keep <= max_size, got keep " +
                                   std::to_string(keep) + ", max_size " + std::to_string(max_size));
  }
  const int64_t rows = buffers_ ? buffers_->keys.array().dim(2) : max_size;
  if (offset < 0 || idx < 0 || idx > rows) {
    return Status::InvalidArgument("RotatingKVCache: meta_state offset " + std::to_string(offset) +
                                   " / _idx " + std::to_string(idx) + " out of range for " +
                                   std::to_string(rows) + " buffered rows");
  }
  keep_ = keep;
  max_size_ = max_size;
  offset_ = offset;
  idx_ = idx;
  return Status::OK();
}

Result<int64_t> RotatingKVCache::Nbytes() const {
  if (buffers_ == nullptr) return int64_t{0};
  return static_cast<int64_t>(buffers_->keys.array().nbytes() + buffers_->values.array().nbytes());
}

Result<int64_t> RotatingKVCache::Trim(int64_t n) {
  if (n < 0) return Status::InvalidArgument("RotatingKVCache: trim by a negative count");
  const int64_t trimmed = std::min(offset_, n);
  offset_ -= trimmed;
  idx_ -= trimmed;  // unguarded after a wrap, as upstream
  return trimmed;
}

Result<Mask> RotatingKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  if (n > 1) {
    const int64_t w = options.window_size.value_or(0) != 0 ? *options.window_size : max_size_;
    const int64_t o = std::min(max_size_ - 1, offset_);
    if (o + n > w || options.return_array) {
      CausalMaskOptions causal;
      causal.offset = o;
      causal.window_size = w;
      KV_ASSIGN_OR_RETURN(Array a, CreateCausalMask(n, causal));
      return Mask::FromArray(std::move(a));
    }
    return Mask::Causal();
  }
  if (!options.window_size) return Mask::None();
  const int64_t w = *options.window_size;
  if (offset_ >= w && max_size_ > w) {
    const int64_t i = idx_ >= max_size_ ? 0 : idx_;
    const int64_t m = offset_ < max_size_ ? offset_ + 1 : max_size_;
    std::vector<uint8_t> base(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j) base[j] = j >= m - w ? 1 : 0;
    Array mask = Array::FromValues<uint8_t>(DType::kBool, {m}, base);
    return Mask::FromArray(mask.Roll(0, i + 1));
  }
  return Mask::None();
}

}  // namespace kvstore
