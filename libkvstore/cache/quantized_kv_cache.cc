// QuantizedKVCache: mlx-lm's cache of affine-quantized keys and values.
#include "kvstore/quantized_kv_cache.h"

#include <string>

#include "kvstore/mask.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/kv_buffers.h"

namespace kvstore {

namespace {
constexpr std::string_view kQuantizedName = "QuantizedKVCache";

std::array<Array, 3> Parts(const QuantizedArray& q) { return {q.packed, q.scales, q.biases}; }

QuantizedArray Sliced(const std::array<CowBuffer, 3>& parts, int64_t stop, bool snapshot) {
  auto get = [&](const CowBuffer& b) {
    if (snapshot) return stop == b.array().dim(2) ? b.Snapshot() : b.Snapshot(2, 0, stop);
    return b.array().Slice(2, 0, stop);
  };
  return QuantizedArray{get(parts[0]), get(parts[1]), get(parts[2])};
}

// A zero triple of `rows` positions for a head dim of `dim`: packed words
// dim / (32 / bits) wide (mlx-lm's width, see docs/compat.md), scales and
// biases of `scale_dtype`.
QuantizedArray ZeroTriple(const Array& like, int64_t rows, int64_t dim, int bits, int group_size,
                          DType scale_dtype) {
  const Shape packed = {like.dim(0), like.dim(1), rows, dim / (32 / bits)};
  const Shape groups = {like.dim(0), like.dim(1), rows, dim / group_size};
  return QuantizedArray{Array::Zeros(DType::kU32, packed), Array::Zeros(scale_dtype, groups),
                        Array::Zeros(scale_dtype, groups)};
}

// The update's triple must match the buffer triple in batch, heads and
// every width. `fresh`: the buffers were just sized by mlx-lm's rule.
Status CheckFits(const std::array<CowBuffer, 3>& buffer, const QuantizedArray& q, const char* which,
                 int bits, bool fresh) {
  const auto parts = Parts(q);
  for (int i = 0; i < 3; ++i) {
    const Array& b = buffer[i].array();
    if (b.dim(0) == parts[i].dim(0) && b.dim(1) == parts[i].dim(1) && b.dim(3) == parts[i].dim(3))
      continue;
    if (fresh) {
      return Status::InvalidArgument("QuantizedKVCache: " + std::to_string(bits) +
                                     "-bit packed width " + std::to_string(q.packed.dim(3)) +
                                     " differs from the buffer width " +
                                     std::to_string(buffer[0].array().dim(3)) +
                                     " mlx-lm allocates (upstream raises here; docs/compat.md)");
    }
    return Status::InvalidArgument(std::string("QuantizedKVCache: update ") + which + " " +
                                   parts[i].Describe() + " does not fit the cached " +
                                   b.Describe());
  }
  return Status::OK();
}

// Writes the triple at `at`, scales and biases cast to the buffers' dtype
// (MLX slice assignment). REQUIRES: CheckFits passed, rows in range.
Status WriteTriple(std::array<CowBuffer, 3>& buffer, int64_t at, const QuantizedArray& q) {
  const auto parts = Parts(q);
  for (int i = 0; i < 3; ++i) {
    KV_ASSIGN_OR_RETURN(Array cast, parts[i].AsType(buffer[i].array().dtype()));
    KV_RETURN_IF_ERROR(buffer[i].Write(2, at, cast));
  }
  return Status::OK();
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
  auto copy = std::make_unique<QuantizedKVCache>(*this);
  if (buffers_) copy->buffers_ = std::make_shared<Buffers>(*buffers_);  // its own, copy-on-write
  return copy;
}

bool QuantizedKVCache::Empty() const { return buffers_ == nullptr; }

// Validates, quantizes and sizes everything first; only then are the
// buffers replaced and written, so a failed update changes nothing.
Result<QuantizedKeysValues> QuantizedKVCache::UpdateAndFetchQuantized(const Array& keys,
                                                                      const Array& values) {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(kQuantizedName, keys, values));
  if (!IsSupportedQuantization(bits_, group_size_)) {
    return Status::InvalidArgument("QuantizedKVCache: unsupported bits " + std::to_string(bits_) +
                                   " / group size " + std::to_string(group_size_));
  }
  const QuantizeOptions options{group_size_, bits_, rounding_};
  KV_ASSIGN_OR_RETURN(QuantizedArray qk, Quantize(keys, options));
  KV_ASSIGN_OR_RETURN(QuantizedArray qv, Quantize(values, options));
  const int64_t prev = offset_;
  const int64_t s = keys.dim(2);
  const bool fresh = buffers_ == nullptr;
  // mlx-lm allocates D // (32 // bits) packed words, which is not the packed
  // width for 3/5/6 bits at most head dims (its write then fails), and gives
  // the scales and biases of both the keys' dtype.
  std::shared_ptr<Buffers> next =
      fresh ? MakeQuantizedBuffers(
                  ZeroTriple(keys, StepRows(s), keys.dim(3), bits_, group_size_, keys.dtype()),
                  ZeroTriple(values, StepRows(s), values.dim(3), bits_, group_size_, keys.dtype()))
            : buffers_;
  KV_RETURN_IF_ERROR(CheckFits(next->keys, qk, "keys", bits_, fresh));
  KV_RETURN_IF_ERROR(CheckFits(next->values, qv, "values", bits_, fresh));
  const int64_t capacity = next->keys[0].array().dim(2);
  if (prev < 0 || prev > capacity) {
    return Status::FailedPrecondition("QuantizedKVCache: offset " + std::to_string(prev) +
                                      " outside the " + std::to_string(capacity) +
                                      " buffered rows");
  }
  if (prev + s > capacity) {
    next = std::make_shared<Buffers>(*buffers_);
    for (auto* triple : {&next->keys, &next->values}) {
      for (CowBuffer& part : *triple)
        part.Reset(GrowRows(part.array(), prev, ZeroRows(part.array(), StepRows(s))));
    }
  }
  buffers_ = std::move(next);
  KV_RETURN_IF_ERROR(WriteTriple(buffers_->keys, prev, qk));
  KV_RETURN_IF_ERROR(WriteTriple(buffers_->values, prev, qv));
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
  return CacheState(
      {CacheState({k.packed, k.scales, k.biases}), CacheState({v.packed, v.scales, v.biases})});
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
    return Status::InvalidArgument(
        std::string("QuantizedKVCache: state ") + which + " " + p.Describe() + ", " +
        sc.Describe() + ", " + b.Describe() +
        " is not a U32 packed rank-4 array with matching float scales/biases");
  }
  for (int a = 0; a < 3; ++a) {
    if (p.dim(a) != sc.dim(a)) {
      return Status::InvalidArgument(std::string("QuantizedKVCache: state ") + which +
                                     " packed and scales disagree in dimension " +
                                     std::to_string(a));
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
  KV_ASSIGN_OR_RETURN(std::vector<int64_t> v,
                      ParseMetaInts(kQuantizedName, meta, {"offset", "group_size", "bits"}));
  const int64_t offset = v[0], group_size = v[1], bits = v[2];
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
    // Keys and values each: packed words * 32 bits == groups * group size * bits.
    for (const auto* q : {&buffers_->keys, &buffers_->values}) {
      const int64_t dim = (*q)[1].array().dim(3) * group_size;
      if ((*q)[0].array().dim(3) * 32 != dim * bits) {
        return Status::InvalidArgument(std::string("QuantizedKVCache: packed width of the ") +
                                       (q == &buffers_->keys ? "keys" : "values") +
                                       " does not match bits " + std::to_string(bits) +
                                       " / group size " + std::to_string(group_size));
      }
    }
  }
  offset_ = offset;
  group_size_ = static_cast<int>(group_size);
  bits_ = static_cast<int>(bits);
  return Status::OK();
}

Result<CacheState> QuantizedKVCache::FullState() const {
  auto triple = [](const std::array<CowBuffer, 3>& t) {
    return CacheState({t[0].Snapshot(), t[1].Snapshot(), t[2].Snapshot()});
  };
  return CacheState({buffers_ ? triple(buffers_->keys) : CacheState::None(),
                     buffers_ ? triple(buffers_->values) : CacheState::None(), CacheState::Int(offset_),
                     CacheState::Int(group_size_), CacheState::Int(bits_)});
}

// The state's and meta_state's checks, on a fresh cache.
Status QuantizedKVCache::SetFullState(const CacheState& state) {
  KV_RETURN_IF_ERROR(
      CheckFullState(kQuantizedName, state, {"keys", "values", "offset", "group_size", "bits"}));
  std::vector<std::string> meta;
  for (size_t i : {2, 3, 4}) {
    static constexpr std::string_view kFields[] = {"", "", "offset", "group_size", "bits"};
    KV_ASSIGN_OR_RETURN(int64_t v, FullStateInt(kQuantizedName, kFields[i], state[i]));
    meta.push_back(std::to_string(v));
  }
  QuantizedKVCache next(group_size_, bits_, rounding_);
  if (!state[0].is_none() || !state[1].is_none()) {
    KV_RETURN_IF_ERROR(next.SetState(CacheState({state[0], state[1]})));
  }
  KV_RETURN_IF_ERROR(next.SetMetaState(MetaState::Strings(meta)));
  *this = std::move(next);
  return Status::OK();
}

// mlx-lm's state is the buffers cut to offset rows, so a saved state holds
// exactly offset tokens (a trim lowers both).
Status QuantizedKVCache::CheckSavedState() const {
  const int64_t rows = buffers_ ? buffers_->keys[0].array().dim(2) : 0;
  if (offset_ == rows) return Status::OK();
  return Status::InvalidArgument("QuantizedKVCache: offset " + std::to_string(offset_) + ", " +
                                 std::to_string(rows) + " rows stored: a saved state holds exactly offset rows");
}

Result<int64_t> QuantizedKVCache::Nbytes() const {
  if (buffers_ == nullptr) {
    return Status::FailedPrecondition("QuantizedKVCache: nbytes of an empty cache (as upstream)");
  }
  int64_t n = 0;
  for (int i = 0; i < 3; ++i) {
    n += static_cast<int64_t>(buffers_->keys[i].array().nbytes() +
                              buffers_->values[i].array().nbytes());
  }
  return n;
}

Result<int64_t> QuantizedKVCache::Trim(int64_t n) {
  KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimCount(kQuantizedName, n, offset_));
  offset_ -= trimmed;
  return trimmed;
}

Result<Mask> QuantizedKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  return CreateAttentionMask(n, offset_, options.return_array, options.window_size);
}

Status QuantizedKVCache::DescribeSpec(CacheSpec& spec) const {
  Result<CacheState> result = State();
  if (!result.ok()) return UnknownShapes(*this, "has no state (" + std::string(result.status().message()) + ")");
  const CacheState& state = *result;
  auto part = [&](size_t i) -> const CacheState& { return state[i]; };
  if (state.size() != 2 || part(0).size() != 3 || part(1).size() != 3 || !part(0)[1].is_array() ||
      !part(0)[0].is_array() || !part(1)[1].is_array() || part(0)[1].array().ndim() != 4 ||
      part(1)[1].array().ndim() != 4) {
    return UnknownShapes(*this, "has no quantized [B, H, S, D] triples");
  }
  spec.group_size = group_size();
  spec.bits = bits();
  spec.dtype = part(0)[1].array().dtype();
  spec.kv_heads = part(0)[0].array().dim(1);
  spec.k_head_dim = part(0)[1].array().dim(3) * group_size();
  spec.v_head_dim = part(1)[1].array().dim(3) * group_size();
  return Status::OK();
}

std::optional<TokenRows> QuantizedKVCache::RowsByPosition() const {
  Result<CacheState> state = State();
  if (!state.ok()) return std::nullopt;
  TokenRows out{0, offset_, {}};
  for (size_t part = 0; part < 2; ++part) {
    for (size_t j = 0; j < 3; ++j) out.arrays.push_back((*state)[part][j].array());
  }
  return out;
}

Status QuantizedKVCache::RestoreRows(const CacheSpec& spec, std::span<const Array> rows) {
  if (rows.size() != 6) return Status::InvalidArgument("QuantizedKVCache: rows are two quantized triples");
  KV_RETURN_IF_ERROR(SetState(CacheState({CacheState({rows[0], rows[1], rows[2]}),
                                          CacheState({rows[3], rows[4], rows[5]})})));
  return SetMetaState(MetaState::Strings(
      {std::to_string(rows[0].dim(2)), std::to_string(spec.group_size), std::to_string(spec.bits)}));
}

}  // namespace kvstore
