// BatchKVCache: a left-padded batch of growing caches.
#include "kvstore/batch_kv_cache.h"

#include <algorithm>
#include <string>

#include "kvstore/kv_cache.h"
#include "kvstore/mask.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/batch_util.h"

namespace kvstore {

namespace {
constexpr std::string_view kBatchKVCacheName = "BatchKVCache";
Status BadBatchKVCache(const std::string& rule) {
  return Status::InvalidArgument("BatchKVCache: " + rule);
}
}  // namespace

BatchKVCache::BatchKVCache(std::vector<int32_t> left_padding)
    : left_padding_(std::move(left_padding)), buffers_(std::make_shared<KVBuffers>()) {
  for (int32_t p : left_padding_) offset_.push_back(-p);
}

std::unique_ptr<Cache> BatchKVCache::Copy() const {
  auto copy = std::make_unique<BatchKVCache>(*this);
  copy->buffers_ = std::make_shared<KVBuffers>(*buffers_);  // its own, copy-on-write
  return copy;
}

Array BatchKVCache::offsets() const { return Array::FromInt32s(offset_); }
Array BatchKVCache::left_padding() const { return Array::FromInt32s(left_padding_); }
bool BatchKVCache::Empty() const { return buffers_->empty(); }

Result<KeysValues> BatchKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckBatchUpdate(kBatchKVCacheName, *buffers_, offset_.size(), keys, values));
  KV_RETURN_IF_ERROR(buffers_->WriteGrowing(kBatchKVCacheName, idx_, keys, values));
  AddToEach(offset_, keys.dim(2));
  idx_ += keys.dim(2);
  return buffers_->Fetch(idx_);
}

Result<CacheState> BatchKVCache::State() const {
  return MakeBatchState(kBatchKVCacheName, *buffers_, idx_, offset_, left_padding_);
}

Status BatchKVCache::SetState(const CacheState& state) {
  KV_ASSIGN_OR_RETURN(BatchState st, ParseBatchState(kBatchKVCacheName, state));
  buffers_->Reset(st.keys, st.values);
  offset_ = std::move(st.offset);
  left_padding_ = std::move(st.left_padding);
  idx_ = buffers_->rows();
  right_padding_.reset();  // not restored upstream either; start clean
  return Status::OK();
}

Result<CacheState> BatchKVCache::FullState() const {
  CacheState::List s = MakeBatchFullState(*buffers_, offset_, left_padding_);
  s.push_back(CacheState::Int(idx_));
  return CacheState(std::move(s));
}

Status BatchKVCache::SetFullState(const CacheState& state) {
  KV_RETURN_IF_ERROR(
      CheckFullState(kBatchKVCacheName, state, {"keys", "values", "offset", "left_padding", "_idx"}));
  KV_ASSIGN_OR_RETURN(BatchState st, ParseBatchFullState(kBatchKVCacheName, state));
  KV_ASSIGN_OR_RETURN(int64_t idx, FullStateInt(kBatchKVCacheName, "_idx", state[4]));
  const int64_t rows = st.keys.defined() ? st.keys.dim(2) : 0;
  if (idx < 0 || idx > rows) {
    return Status::InvalidArgument("BatchKVCache: _idx " + std::to_string(idx) + " outside the " +
                                   std::to_string(rows) + " buffered rows");
  }
  buffers_->Reset(st.keys, st.values);
  offset_ = std::move(st.offset);
  left_padding_ = std::move(st.left_padding);
  idx_ = idx;
  right_padding_.reset();
  return Status::OK();
}

Result<int64_t> BatchKVCache::Nbytes() const { return buffers_->nbytes(); }

Result<int64_t> BatchKVCache::Trim(int64_t n) {
  KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimCount(kBatchKVCacheName, n, idx_));
  idx_ -= trimmed;
  AddToEach(offset_, -trimmed);
  return trimmed;
}

Result<Mask> BatchKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *buffers_, offset_.size()));
  CausalMaskOptions causal;
  causal.offset = idx_;
  causal.window_size = options.window_size;
  causal.left_padding = std::span<const int32_t>(left_padding_);
  KV_ASSIGN_OR_RETURN(Array mask, CreateCausalMask(n, causal));
  return Mask::FromArray(std::move(mask));
}

Status BatchKVCache::Prepare(const PrepareArgs& args) {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckLeftPadding(kBatchKVCacheName, args, buffers_->empty(), offset_.size()));
  const bool right = HasRightPadding(args);
  if (right && args.right_padding->size() != offset_.size())
    return BadBatchKVCache("right_padding has the wrong batch size");
  ApplyLeftPadding(args, offset_, left_padding_);
  if (right) right_padding_ = *args.right_padding;
  return Status::OK();
}

Status BatchKVCache::Finalize() {
  if (!right_padding_) return Status::OK();
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *buffers_, offset_.size()));
  if (buffers_->empty()) return BadBatchKVCache("finalize with right padding on an empty cache");
  KV_RETURN_IF_ERROR(
      CheckPending(kBatchKVCacheName, "right_padding", *right_padding_, offset_.size()));
  const std::vector<int32_t> pad = *right_padding_;
  buffers_->Map([&](const Array& a) { return DynamicRoll(a, pad); });
  for (size_t i = 0; i < pad.size(); ++i) {
    offset_[i] -= pad[i];
    left_padding_[i] += pad[i];
  }
  right_padding_.reset();
  return Status::OK();
}

Status BatchKVCache::Filter(std::span<const int64_t> batch_indices) {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckBatchIndices(kBatchKVCacheName, batch_indices, offset_.size()));
  if (!buffers_->empty()) buffers_->Map([&](const Array& a) { return a.Take(0, batch_indices); });
  offset_ = TakeRows(offset_, batch_indices);
  left_padding_ = TakeRows(left_padding_, batch_indices);
  // Shift left to drop the padding every remaining row shares. An empty
  // cache keeps its padding (upstream would move _idx below zero).
  const int32_t m =
      left_padding_.empty() ? 0 : *std::min_element(left_padding_.begin(), left_padding_.end());
  if (m > 0 && !buffers_->empty()) {
    buffers_->Map(
        [&](const Array& a) { return a.Slice(2, std::min<int64_t>(m, a.dim(2)), a.dim(2)); });
    idx_ -= m;
    AddToEach(left_padding_, -m);
  }
  return Status::OK();
}

Status BatchKVCache::Extend(Cache& other_cache) {
  auto* other = dynamic_cast<BatchKVCache*>(&other_cache);
  if (other == nullptr) return BadBatchKVCache("extend needs another BatchKVCache");
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *other->buffers_, other->offset_.size()));
  const KVBuffers& mine = *buffers_;
  const KVBuffers& theirs = *other->buffers_;
  KV_ASSIGN_OR_RETURN(
      ExtendedBatch merged,
      ExtendBatches(kBatchKVCacheName,
                    BatchSide{mine.keys(), mine.values(), idx_, offset_, left_padding_},
                    BatchSide{theirs.keys(), theirs.values(), other->idx_, other->offset_,
                              other->left_padding_}));
  if (merged.keys.defined()) buffers_->Reset(merged.keys, merged.values);
  offset_ = std::move(merged.offset);
  left_padding_ = std::move(merged.left_padding);
  idx_ = merged.idx;
  return Status::OK();
}

Result<std::unique_ptr<Cache>> BatchKVCache::Extract(int64_t index) const {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchKVCacheName, *buffers_, offset_.size()));
  KV_ASSIGN_OR_RETURN(const int64_t row, BatchRow(kBatchKVCacheName, index, offset_.size()));
  auto out = std::make_unique<KVCache>();
  if (buffers_->empty()) return std::unique_ptr<Cache>(std::move(out));
  const int64_t start = std::clamp<int64_t>(left_padding_[row], 0, idx_);
  auto cut = [&](const Array& a) { return a.Slice(0, row, row + 1).Slice(2, start, idx_).Clone(); };
  KV_RETURN_IF_ERROR(out->SetState(CacheState({cut(buffers_->keys()), cut(buffers_->values())})));
  return std::unique_ptr<Cache>(std::move(out));
}

Result<std::unique_ptr<BatchKVCache>> BatchKVCache::Merge(std::span<const Cache* const> caches) {
  KV_ASSIGN_OR_RETURN(std::vector<const KVCache*> in,
                      Downcast<KVCache>(kBatchKVCacheName, "KVCache", caches));
  std::vector<KeysValues> rows;
  for (const KVCache* c : in) {
    if (c->Empty())
      rows.emplace_back();
    else
      rows.push_back(
          {c->keys_buffer().Slice(2, 0, c->Size()), c->values_buffer().Slice(2, 0, c->Size())});
  }
  KV_ASSIGN_OR_RETURN(MergedBatch m, MergeBatch(kBatchKVCacheName, rows));
  auto out = std::make_unique<BatchKVCache>(m.padding);
  if (m.length == 0) return out;
  out->buffers_->Reset(m.keys, m.values);
  AddToEach(out->offset_, m.length);
  out->idx_ = m.length;
  return out;
}

}  // namespace kvstore
