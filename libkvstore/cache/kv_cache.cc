// KVCache and ConcatenateKVCache: mlx-lm's growing attention caches
// (docs/compat.md lists where they differ).
#include "kvstore/kv_cache.h"

#include "kvstore/mask.h"
#include "kvstore/quantized_kv_cache.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/kv_buffers.h"

namespace kvstore {

namespace {
constexpr std::string_view kName = "KVCache";
constexpr std::string_view kConcatName = "ConcatenateKVCache";
}  // namespace

KVCache::KVCache() : buffers_(std::make_shared<KVBuffers>()) {}

std::unique_ptr<Cache> KVCache::Copy() const {
  auto copy = std::make_unique<KVCache>(*this);
  copy->buffers_ = std::make_shared<KVBuffers>(*buffers_);  // its own, copy-on-write
  return copy;
}

bool KVCache::Empty() const { return buffers_->empty(); }
const Array& KVCache::keys_buffer() const { return buffers_->keys(); }
const Array& KVCache::values_buffer() const { return buffers_->values(); }

Result<KeysValues> KVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(buffers_->WriteGrowing(kName, offset_, keys, values));
  offset_ += keys.dim(2);
  return buffers_->Fetch(offset_);
}

Result<CacheState> KVCache::State() const { return buffers_->State(kName, offset_); }

Status KVCache::SetState(const CacheState& state) {
  KV_RETURN_IF_ERROR(buffers_->Restore(kName, state));
  offset_ = buffers_->rows();
  return Status::OK();
}

Result<CacheState> KVCache::FullState() const {
  return CacheState({buffers_->FullKeys(), buffers_->FullValues(), CacheState::Int(offset_)});
}

Status KVCache::SetFullState(const CacheState& state) {
  KV_RETURN_IF_ERROR(CheckFullState(kName, state, {"keys", "values", "offset"}));
  KV_ASSIGN_OR_RETURN(int64_t offset, FullStateInt(kName, "offset", state[2]));
  auto next = std::make_shared<KVBuffers>();
  KV_RETURN_IF_ERROR(next->RestoreFull(kName, state[0], state[1]));
  if (offset < 0 || offset > next->rows()) {
    return Status::InvalidArgument("KVCache: offset " + std::to_string(offset) + " outside the " +
                                   std::to_string(next->rows()) + " buffered rows");
  }
  buffers_ = std::move(next);
  offset_ = offset;
  return Status::OK();
}

Result<int64_t> KVCache::Nbytes() const { return buffers_->nbytes(); }

Result<int64_t> KVCache::Trim(int64_t n) {
  KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimCount(kName, n, offset_));
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
  if (!buffers_->empty()) {
    QuantizeOptions options{group_size, bits, rounding};
    KV_ASSIGN_OR_RETURN(QuantizedArray k, Quantize(buffers_->keys(), options));
    KV_ASSIGN_OR_RETURN(QuantizedArray v, Quantize(buffers_->values(), options));
    q->buffers_ = MakeQuantizedBuffers(std::move(k), std::move(v));
  }
  return q;
}

// ---- ConcatenateKVCache ----

ConcatenateKVCache::ConcatenateKVCache() : buffers_(std::make_shared<KVBuffers>()) {}

std::unique_ptr<Cache> ConcatenateKVCache::Copy() const {
  auto copy = std::make_unique<ConcatenateKVCache>(*this);
  copy->buffers_ = std::make_shared<KVBuffers>(*buffers_);  // its own, copy-on-write
  return copy;
}

bool ConcatenateKVCache::Empty() const { return buffers_->empty(); }

Result<KeysValues> ConcatenateKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(buffers_->CheckUpdate(kConcatName, keys, values));
  if (buffers_->empty()) {
    buffers_->Reset(keys, values);
  } else {
    buffers_->Reset(ConcatRows({buffers_->keys(), keys}), ConcatRows({buffers_->values(), values}));
  }
  offset_ = buffers_->rows();
  return buffers_->Fetch(offset_);
}

Result<CacheState> ConcatenateKVCache::State() const {
  // Upstream returns (None, None) when empty (saving that then fails).
  if (buffers_->empty()) return CacheState({CacheState::None(), CacheState::None()});
  return buffers_->State(kConcatName, buffers_->rows());
}

Result<CacheState> ConcatenateKVCache::FullState() const {
  if (buffers_->empty()) {
    return Status::FailedPrecondition("ConcatenateKVCache: mlx-lm 0.32 cannot load an empty one (its state is None)");
  }
  return State();
}

Status ConcatenateKVCache::SetState(const CacheState& state) {
  KV_RETURN_IF_ERROR(buffers_->Restore(kConcatName, state));
  offset_ = buffers_->rows();
  return Status::OK();
}

Result<int64_t> ConcatenateKVCache::Nbytes() const { return buffers_->nbytes(); }

Result<int64_t> ConcatenateKVCache::Trim(int64_t n) {
  KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimCount(kConcatName, n, offset_));
  offset_ -= trimmed;  // cosmetic, as upstream (docs/compat.md)
  return trimmed;
}

Result<Mask> ConcatenateKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  return CreateAttentionMask(n, offset_, options.return_array, options.window_size);
}

std::optional<TokenRows> KVCache::RowsByPosition() const {
  Result<CacheState> state = State();
  if (!state.ok()) return std::nullopt;
  return LeadingRows(*state, 0, offset_);
}

Status KVCache::RestoreRows(const CacheSpec&, std::span<const Array> rows) {
  if (rows.size() != 2) return Status::InvalidArgument("KVCache: rows are keys and values");
  return SetState(CacheState({rows[0], rows[1]}));
}

}  // namespace kvstore
