// RotatingKVCache: mlx-lm's sliding-window cache.
#include "kvstore/rotating_kv_cache.h"

#include <algorithm>
#include <string>

#include "kvstore/mask.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/kv_buffers.h"
#include "libkvstore/cache/rotating_buffers.h"

namespace kvstore {

namespace {
constexpr std::string_view kRotatingName = "RotatingKVCache";
}  // namespace

RotatingKVCache::RotatingKVCache(int64_t max_size, int64_t keep)
    : max_size_(max_size), keep_(keep), buffers_(std::make_shared<KVBuffers>()) {}

std::unique_ptr<Cache> RotatingKVCache::Copy() const {
  auto copy = std::make_unique<RotatingKVCache>(*this);
  copy->buffers_ = std::make_shared<KVBuffers>(*buffers_);  // its own, copy-on-write
  return copy;
}

const Array& RotatingKVCache::keys_buffer() const { return buffers_->keys(); }
const Array& RotatingKVCache::values_buffer() const { return buffers_->values(); }
bool RotatingKVCache::Empty() const { return buffers_->empty(); }
int64_t RotatingKVCache::Size() const { return std::min(offset_, max_size_); }

Result<KeysValues> RotatingKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(buffers_->CheckUpdate(kRotatingName, keys, values));
  const int64_t s = keys.dim(2);
  if (s != 1) {
    // Concat path: the buffer in temporal order, oldest non-kept rows
    // dropped so that every new position still sees max_size - 1 others.
    if (buffers_->empty()) {
      buffers_->Reset(keys, values);
    } else {
      const Array k = RotatingTemporalOrder(buffers_->keys(), keep_, idx_, offset_);
      const Array v = RotatingTemporalOrder(buffers_->values(), keep_, idx_, offset_);
      const int64_t trim = k.dim(2) - max_size_ + 1;
      buffers_->Reset(TrimRows(k, keep_, trim, keys), TrimRows(v, keep_, trim, values));
    }
    offset_ += s;
    idx_ = buffers_->rows();
    return buffers_->Fetch(idx_);
  }
  // In-place path (one token): keys[..., idx:idx+1, :] = keys, where a write
  // past the end (keep == max_size) is dropped, as upstream.
  KV_ASSIGN_OR_RETURN(RotatingSlot slot, PlanInPlaceWrite(kRotatingName, *buffers_, offset_, idx_,
                                                          max_size_, keep_, keys, values));
  if (slot.replaced) buffers_->Reset(slot.keys, slot.values);
  idx_ = slot.idx == max_size_ ? keep_ : slot.idx;
  buffers_->WriteAt(idx_, keys, values);
  offset_ += s;
  idx_ += s;
  return FetchWindow(*buffers_, offset_, max_size_);
}

Result<CacheState> RotatingKVCache::State() const {
  return buffers_->State(kRotatingName, offset_);
}

// Only the buffers: offset and _idx come with the meta_state, as upstream.
Status RotatingKVCache::SetState(const CacheState& state) {
  return buffers_->Restore(kRotatingName, state);
}

MetaState RotatingKVCache::meta_state() const {
  return MetaState::Strings({std::to_string(keep_), std::to_string(max_size_),
                             std::to_string(offset_), std::to_string(idx_)});
}

Status RotatingKVCache::SetMetaState(const MetaState& meta) {
  KV_ASSIGN_OR_RETURN(std::vector<int64_t> v,
                      ParseMetaInts(kRotatingName, meta, {"keep", "max_size", "offset", "_idx"}));
  const int64_t keep = v[0], max_size = v[1], offset = v[2], idx = v[3];
  if (max_size < 1 || keep < 0 || keep > max_size) {
    return Status::InvalidArgument(
        "RotatingKVCache: meta_state needs max_size >= 1 and 0 <= keep <= max_size, got keep " +
        std::to_string(keep) + ", max_size " + std::to_string(max_size));
  }
  // _idx, where the next token goes, never passes the tokens seen nor the
  // buffered rows, except with keep == max_size: there mlx-lm's rotation
  // restarts at keep, past the end, and drops the writes, while _idx counts
  // on. CheckSavedState has the rest.
  const int64_t rows = buffers_->empty() ? max_size : buffers_->rows();
  const int64_t idx_bound = keep == max_size ? offset : std::min(rows, offset);
  if (offset < 0 || idx < 0 || idx > idx_bound) {
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

Result<CacheState> RotatingKVCache::FullState() const {
  return CacheState({buffers_->FullKeys(), buffers_->FullValues(), CacheState::Int(offset_), CacheState::Int(keep_),
                     CacheState::Int(max_size_), CacheState::Int(idx_)});
}

// The meta_state's checks, on a fresh cache: nothing changes on an error.
Status RotatingKVCache::SetFullState(const CacheState& state) {
  KV_RETURN_IF_ERROR(
      CheckFullState(kRotatingName, state, {"keys", "values", "offset", "keep", "max_size", "_idx"}));
  std::vector<std::string> meta;  // [keep, max_size, offset, _idx]
  for (size_t i : {3, 4, 2, 5}) {
    static constexpr std::string_view kFields[] = {"", "", "offset", "keep", "max_size", "_idx"};
    KV_ASSIGN_OR_RETURN(int64_t v, FullStateInt(kRotatingName, kFields[i], state[i]));
    meta.push_back(std::to_string(v));
  }
  RotatingKVCache next(0, 0);
  KV_RETURN_IF_ERROR(next.buffers_->RestoreFull(kRotatingName, state[0], state[1]));
  KV_RETURN_IF_ERROR(next.SetMetaState(MetaState::Strings(meta)));
  *this = std::move(next);
  return Status::OK();
}

// mlx-lm's state is the buffer cut to offset rows; its in-place path grows
// the buffer to max_size before it wraps, and its concat path keeps at
// least max_size - 1 rows once it drops one. So a saved window holding
// fewer rows than its offset holds max_size - 1 rows or more (a decode from
// a shorter one fails: the buffer would have to grow by max_size - offset).
Status RotatingKVCache::CheckSavedState() const {
  const int64_t rows = buffers_->rows();
  const std::string where = "RotatingKVCache: offset " + std::to_string(offset_) + ", ";
  if (rows > offset_) {
    return Status::InvalidArgument(where + std::to_string(rows) +
                                   " rows stored: a saved state holds at most offset rows");
  }
  if (offset_ > rows && rows < max_size_ - 1) {
    return Status::InvalidArgument(where + std::to_string(rows) + " rows stored, max_size " +
                                   std::to_string(max_size_) +
                                   ": a window that has dropped rows holds at least max_size - 1");
  }
  return Status::OK();
}

Result<int64_t> RotatingKVCache::Nbytes() const { return buffers_->nbytes(); }

Result<int64_t> RotatingKVCache::Trim(int64_t n) {
  KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimCount(kRotatingName, n, offset_));
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

Status RotatingKVCache::DescribeSpec(CacheSpec& spec) const {
  KV_RETURN_IF_ERROR(Cache::DescribeSpec(spec));
  spec.max_size = max_size_;
  spec.keep = keep_;
  return Status::OK();
}

namespace {

// mlx-lm's _temporal_order of a rotating buffer: the rows oldest first.
Array TemporalOrder(const RotatingKVCache& r, const Array& v) {
  const int64_t len = v.dim(2), idx = r.idx(), keep = r.keep();
  if (idx == len) return v;
  if (idx < r.offset().value_or(0)) {
    const Array parts[] = {v.Slice(2, 0, keep), v.Slice(2, idx, len), v.Slice(2, keep, idx)};
    return Array::Concatenate(parts, 2);
  }
  return v.Slice(2, 0, idx);
}

}  // namespace

// Rows rebuild a window only from position 0 on, so a window that has
// dropped rows offers none (its state goes into snapshots instead).
std::optional<TokenRows> RotatingKVCache::RowsByPosition() const {
  if (!State().ok()) return std::nullopt;
  const Array k = TemporalOrder(*this, keys_buffer()), v = TemporalOrder(*this, values_buffer());
  if (k.dim(2) < offset_) return std::nullopt;
  return TokenRows{0, offset_, {k.Slice(2, 0, offset_), v.Slice(2, 0, offset_)}};
}

Status RotatingKVCache::RestoreRows(const CacheSpec& spec, std::span<const Array> rows) {
  if (rows.size() != 2) return Status::InvalidArgument("RotatingKVCache: rows are keys and values");
  const std::string n = std::to_string(rows[0].dim(2));
  KV_RETURN_IF_ERROR(SetState(CacheState({rows[0], rows[1]})));
  return SetMetaState(MetaState::Strings({std::to_string(spec.keep), std::to_string(spec.max_size), n, n}));
}

}  // namespace kvstore
