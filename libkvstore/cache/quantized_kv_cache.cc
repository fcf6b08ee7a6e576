// QuantizedKVCache (spec §5).
#include "kvstore/quantized_kv_cache.h"

#include <string>

#include "kvstore/mask.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/quantized_buffers.h"

namespace kvstore {

namespace {
constexpr std::string_view kName = "QuantizedKVCache";

std::array<Array, 3> Parts(const QuantizedArray& q) { return {q.packed, q.scales, q.biases}; }

QuantizedArray Sliced(const std::array<CowBuffer, 3>& parts, int64_t stop, bool snapshot) {
  auto get = [&](const CowBuffer& b) {
    if (snapshot) return stop == b.array().dim(2) ? b.Snapshot() : b.Snapshot(2, 0, stop);
    return b.array().Slice(2, 0, stop);
  };
  return QuantizedArray{get(parts[0]), get(parts[1]), get(parts[2])};
}

Array Zeros(const Array& like, int64_t rows, int64_t width, DType dtype) {
  return Array::Zeros(dtype, {like.dim(0), like.dim(1), rows, width});
}

// Grows one part: cut to `prev` when unaligned, then append `rows` zero rows.
void GrowPart(CowBuffer& part, int64_t prev, int64_t rows) {
  const Array& a = part.array();
  Array kept = prev % QuantizedKVCache::kStep != 0 ? a.Slice(2, 0, prev) : a;
  const Array pieces[] = {kept, Array::Zeros(a.dtype(), {a.dim(0), a.dim(1), rows, a.dim(3)})};
  part.Reset(Array::Concatenate(pieces, 2));
}
}  // namespace

std::shared_ptr<QuantizedKVCache::Buffers> MakeQuantizedBuffers(QuantizedArray keys,
                                                                QuantizedArray values) {
  auto b = std::make_shared<QuantizedKVCache::Buffers>();
  auto k = Parts(keys), v = Parts(values);
  for (int i = 0; i < 3; ++i) {
    b->keys[i].Reset(std::move(k[i]));
    b->values[i].Reset(std::move(v[i]));
  }
  return b;
}

QuantizedKVCache::QuantizedKVCache(int group_size, int bits, QuantizeOptions::Rounding rounding)
    : group_size_(group_size), bits_(bits), rounding_(rounding) {}

std::unique_ptr<Cache> QuantizedKVCache::Copy() const {
  auto copy = std::make_unique<QuantizedKVCache>(group_size_, bits_, rounding_);
  copy->offset_ = offset_;
  if (buffers_) copy->buffers_ = std::make_shared<Buffers>(*buffers_);
  return copy;
}

bool QuantizedKVCache::Empty() const { return buffers_ == nullptr; }

Result<QuantizedKeysValues> QuantizedKVCache::UpdateAndFetchQuantized(const Array& keys,
                                                                      const Array& values) {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(kName, keys, values));
  if (!IsSupportedQuantization(bits_, group_size_)) {
    return Status::InvalidArgument("QuantizedKVCache: unsupported bits " + std::to_string(bits_) +
                                   " / group size " + std::to_string(group_size_));
  }
  const QuantizeOptions options{group_size_, bits_, rounding_};
  KV_ASSIGN_OR_RETURN(QuantizedArray qk, Quantize(keys, options));
  KV_ASSIGN_OR_RETURN(QuantizedArray qv, Quantize(values, options));
  const int64_t prev = offset_;
  const int64_t s = keys.dim(2);
  // mlx-lm sizes the packed buffer D // (32 // bits), which is not the packed
  // width for 3/5/6 bits at most head dims; the write then fails (faithful).
  const int64_t el_per_int = 32 / bits_;
  const int64_t kwidth = keys.dim(3) / el_per_int, vwidth = values.dim(3) / el_per_int;
  if (buffers_ == nullptr) {
    if (kwidth != qk.packed.dim(3) || vwidth != qv.packed.dim(3)) {
      return Status::InvalidArgument(
          "QuantizedKVCache: " + std::to_string(bits_) + "-bit packed width " +
          std::to_string(qk.packed.dim(3)) + " differs from the buffer width " +
          std::to_string(kwidth) + " mlx-lm allocates (upstream raises here; docs/compat.md)");
    }
  } else {
    const Array& kp = buffers_->keys[0].array();
    const Array& vp = buffers_->values[0].array();
    if (kp.dim(0) != qk.packed.dim(0) || kp.dim(1) != qk.packed.dim(1) ||
        kp.dim(3) != qk.packed.dim(3) || vp.dim(3) != qv.packed.dim(3) ||
        buffers_->keys[1].array().dtype() != qk.scales.dtype() ||
        buffers_->values[1].array().dtype() != qv.scales.dtype()) {
      return Status::InvalidArgument("QuantizedKVCache: update " + keys.Describe() +
                                     " does not fit the cached " + kp.Describe());
    }
  }
  if (buffers_ == nullptr || prev + s > buffers_->keys[0].array().dim(2)) {
    const int64_t rows = (s + kStep - 1) / kStep * kStep;
    if (buffers_ == nullptr) {
      const int64_t kg = keys.dim(3) / group_size_, vg = values.dim(3) / group_size_;
      buffers_ = MakeQuantizedBuffers(
          QuantizedArray{Zeros(keys, rows, kwidth, DType::kU32), Zeros(keys, rows, kg, keys.dtype()),
                         Zeros(keys, rows, kg, keys.dtype())},
          QuantizedArray{Zeros(values, rows, vwidth, DType::kU32),
                         Zeros(values, rows, vg, values.dtype()),
                         Zeros(values, rows, vg, values.dtype())});
    } else {
      for (int i = 0; i < 3; ++i) {
        GrowPart(buffers_->keys[i], prev, rows);
        GrowPart(buffers_->values[i], prev, rows);
      }
    }
  }
  const auto kparts = Parts(qk), vparts = Parts(qv);
  for (int i = 0; i < 3; ++i) {
    KV_RETURN_IF_ERROR(buffers_->keys[i].Write(2, prev, kparts[i]));
    KV_RETURN_IF_ERROR(buffers_->values[i].Write(2, prev, vparts[i]));
  }
  offset_ = prev + s;
  return QuantizedKeysValues{Sliced(buffers_->keys, offset_, false),
                             Sliced(buffers_->values, offset_, false)};
}

Result<KeysValues> QuantizedKVCache::UpdateAndFetch(const Array&, const Array&) {
  return Status::NotSupported(
      "QuantizedKVCache returns quantized triples: use UpdateAndFetchQuantized");
}

Result<CacheState> QuantizedKVCache::State() const {
  if (buffers_ == nullptr) {
    return Status::FailedPrecondition("QuantizedKVCache: an empty cache has no state");
  }
  const QuantizedArray k = Sliced(buffers_->keys, offset_, true);
  const QuantizedArray v = Sliced(buffers_->values, offset_, true);
  return CacheState({CacheState({k.packed, k.scales, k.biases}),
                     CacheState({v.packed, v.scales, v.biases})});
}

namespace {
Status CheckTriple(const CacheState& s, const char* which) {
  if (!s.is_list() || s.size() != 3 || !s[0].is_array() || !s[1].is_array() || !s[2].is_array()) {
    return Status::InvalidArgument(std::string("QuantizedKVCache: state ") + which +
                                   " must be a list of 3 arrays (packed, scales, biases)");
  }
  const Array& p = s[0].array();
  const Array& sc = s[1].array();
  const Array& b = s[2].array();
  if (p.dtype() != DType::kU32 || p.ndim() != 4 || sc.ndim() != 4 || sc.shape() != b.shape() ||
      sc.dtype() != b.dtype() || !IsFloating(sc.dtype())) {
    return Status::InvalidArgument(std::string("QuantizedKVCache: state ") + which + " " +
                                   p.Describe() + ", " + sc.Describe() + ", " + b.Describe() +
                                   " is not a U32 packed rank-4 array with matching float scales/biases");
  }
  for (int a = 0; a < 3; ++a) {
    if (p.dim(a) != sc.dim(a)) {
      return Status::InvalidArgument(std::string("QuantizedKVCache: state ") + which +
                                     " packed and scales disagree in dimension " + std::to_string(a));
    }
  }
  return Status::OK();
}
}  // namespace

Status QuantizedKVCache::SetState(const CacheState& state) {
  if (!state.is_list() || state.size() != 2) {
    return Status::InvalidArgument("QuantizedKVCache: state must be [keys triple, values triple]");
  }
  KV_RETURN_IF_ERROR(CheckTriple(state[0], "keys"));
  KV_RETURN_IF_ERROR(CheckTriple(state[1], "values"));
  const Array& kp = state[0][0].array();
  const Array& vp = state[1][0].array();
  if (kp.dim(0) != vp.dim(0) || kp.dim(1) != vp.dim(1) || kp.dim(2) != vp.dim(2)) {
    return Status::InvalidArgument("QuantizedKVCache: keys and values disagree in B, H or S");
  }
  buffers_ = MakeQuantizedBuffers(
      QuantizedArray{state[0][0].array(), state[0][1].array(), state[0][2].array()},
      QuantizedArray{state[1][0].array(), state[1][1].array(), state[1][2].array()});
  return Status::OK();
}

MetaState QuantizedKVCache::meta_state() const {
  return MetaState::Strings(
      {std::to_string(offset_), std::to_string(group_size_), std::to_string(bits_)});
}

Status QuantizedKVCache::SetMetaState(const MetaState& meta) {
  if (!meta.is_list() || meta.size() != 3) {
    return Status::InvalidArgument("QuantizedKVCache: meta_state must be [offset, group_size, bits]");
  }
  KV_ASSIGN_OR_RETURN(int64_t offset, ParseMetaInt(kName, "offset", meta[0]));
  KV_ASSIGN_OR_RETURN(int64_t group_size, ParseMetaInt(kName, "group_size", meta[1]));
  KV_ASSIGN_OR_RETURN(int64_t bits, ParseMetaInt(kName, "bits", meta[2]));
  // Range first: the casts below must not truncate a hostile value into a valid one.
  if (bits < 1 || bits > 8 || group_size < 1 || group_size > 128 ||
      !IsSupportedQuantization(static_cast<int>(bits), static_cast<int>(group_size))) {
    return Status::InvalidArgument("QuantizedKVCache: meta_state bits " + std::to_string(bits) +
                                   " / group size " + std::to_string(group_size) +
                                   " are not supported");
  }
  const int64_t capacity = buffers_ ? buffers_->keys[0].array().dim(2) : 0;
  if (offset < 0 || offset > capacity) {
    return Status::InvalidArgument("QuantizedKVCache: meta_state offset " + std::to_string(offset) +
                                   " outside [0, " + std::to_string(capacity) + "]");
  }
  if (buffers_) {
    const int64_t dk = buffers_->keys[1].array().dim(3) * group_size;
    if (buffers_->keys[0].array().dim(3) * 32 != dk * bits) {
      return Status::InvalidArgument("QuantizedKVCache: packed width does not match bits " +
                                     std::to_string(bits) + " / group size " +
                                     std::to_string(group_size));
    }
  }
  offset_ = offset;
  group_size_ = static_cast<int>(group_size);
  bits_ = static_cast<int>(bits);
  return Status::OK();
}

Result<int64_t> QuantizedKVCache::Nbytes() const {
  if (buffers_ == nullptr) {
    return Status::FailedPrecondition("QuantizedKVCache: nbytes of an empty cache (as upstream)");
  }
  int64_t n = 0;
  for (int i = 0; i < 3; ++i) {
    n += static_cast<int64_t>(buffers_->keys[i].array().nbytes() + buffers_->values[i].array().nbytes());
  }
  return n;
}

Result<int64_t> QuantizedKVCache::Trim(int64_t n) {
  if (n < 0) return Status::InvalidArgument("QuantizedKVCache: trim by a negative count");
  const int64_t trimmed = std::min(offset_, n);
  offset_ -= trimmed;
  return trimmed;
}

Result<Mask> QuantizedKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  return CreateAttentionMask(n, offset_, options.return_array, options.window_size);
}

}  // namespace kvstore
