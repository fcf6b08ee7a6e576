// BatchRotatingKVCache: a batched sliding window. Faithful to mlx-lm,
// including meta_state's bool("False") == True (docs/compat.md).
#include "kvstore/batch_rotating_kv_cache.h"

#include <algorithm>
#include <string>

#include "kvstore/mask.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/batch_util.h"
#include "libkvstore/cache/py_slice.h"
#include "libkvstore/cache/rotating_buffers.h"

namespace kvstore {

namespace {
constexpr std::string_view kBatchRotatingName = "BatchRotatingKVCache";
Status BadBatchRotating(const std::string& rule) {
  return Status::InvalidArgument("BatchRotatingKVCache: " + rule);
}

// The buffers in temporal order (_temporal_order, without changing them).
struct Ordered {
  Array keys;
  Array values;
  int64_t idx;
};
Ordered TemporalOrder(const KVBuffers& b, int64_t idx, bool rotated) {
  if (!rotated || b.empty()) return Ordered{b.keys(), b.values(), idx};
  Array k = b.keys().Roll(2, -idx);
  Array v = b.values().Roll(2, -idx);
  return Ordered{k, v, k.dim(2)};
}

// Rolls the right padding of rows whose offset passed their length to the
// front (concat path and finalize). REQUIRES: lengths has one entry per row.
void RollPastLengths(Array& keys, Array& values, std::vector<int32_t>& offset,
                     std::vector<int32_t>& left, const std::vector<int32_t>& lengths) {
  std::vector<int32_t> roll(offset.size());
  for (size_t i = 0; i < offset.size(); ++i) roll[i] = std::max(0, offset[i] - lengths[i]);
  keys = DynamicRoll(keys, roll);
  values = DynamicRoll(values, roll);
  for (size_t i = 0; i < offset.size(); ++i) {
    left[i] += roll[i];
    offset[i] -= roll[i];
  }
}
}  // namespace

BatchRotatingKVCache::BatchRotatingKVCache(int64_t max_size, std::vector<int32_t> left_padding)
    : max_size_(max_size),
      left_padding_(std::move(left_padding)),
      buffers_(std::make_shared<KVBuffers>()) {
  for (int32_t p : left_padding_) offset_.push_back(-p);
}

std::unique_ptr<Cache> BatchRotatingKVCache::Copy() const {
  auto copy = std::make_unique<BatchRotatingKVCache>(*this);
  copy->buffers_ = std::make_shared<KVBuffers>(*buffers_);  // its own, copy-on-write
  return copy;
}

Array BatchRotatingKVCache::offsets() const { return Array::FromInt32s(offset_); }
Array BatchRotatingKVCache::left_padding() const { return Array::FromInt32s(left_padding_); }
int64_t BatchRotatingKVCache::Size() const { return std::min(seq_offset_, max_size_); }
bool BatchRotatingKVCache::Empty() const { return buffers_->empty(); }

Result<KeysValues> BatchRotatingKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckBatchUpdate(kBatchRotatingName, *buffers_, offset_.size(), keys, values));
  if (lengths_)
    KV_RETURN_IF_ERROR(CheckPending(kBatchRotatingName, "lengths", *lengths_, offset_.size()));
  return keys.dim(2) == 1 ? UpdateInPlace(keys, values) : UpdateConcat(keys, values);
}

Result<KeysValues> BatchRotatingKVCache::UpdateConcat(const Array& keys, const Array& values) {
  if (buffers_->empty()) {
    buffers_->Reset(keys, values);
  } else {
    const Ordered o = TemporalOrder(*buffers_, idx_, rotated_);
    Array k = PySlice(o.keys, 2, std::nullopt, o.idx);
    Array v = PySlice(o.values, 2, std::nullopt, o.idx);
    std::vector<int32_t> offset = offset_, left = left_padding_;
    if (lengths_) RollPastLengths(k, v, offset, left, *lengths_);
    // At most max_size + S - 1 rows, so every new position sees max_size.
    const int64_t trim = o.idx - max_size_ + 1;
    if (trim > 0) AddToEach(left, -trim);
    buffers_->Reset(TrimRows(k, 0, trim, keys), TrimRows(v, 0, trim, values));
    offset_ = std::move(offset);
    left_padding_ = std::move(left);
    rotated_ = false;
  }
  AddToEach(offset_, keys.dim(2));
  seq_offset_ += keys.dim(2);
  idx_ = buffers_->rows();
  return buffers_->Fetch(idx_);
}

Result<KeysValues> BatchRotatingKVCache::UpdateInPlace(const Array& keys, const Array& values) {
  if (lengths_) {
    return Status::FailedPrecondition(
        "BatchRotatingKVCache: finalize() the right-padded prefill before decoding");
  }
  KV_ASSIGN_OR_RETURN(RotatingSlot slot,
                      PlanInPlaceWrite(kBatchRotatingName, *buffers_, seq_offset_, idx_, max_size_,
                                       0, keys, values));
  if (slot.replaced) buffers_->Reset(slot.keys, slot.values);
  AddToEach(left_padding_, -slot.dropped);
  idx_ = slot.idx;
  if (idx_ == max_size_) {
    rotated_ = true;
    idx_ = 0;
  }
  if (rotated_) AddToEach(left_padding_, -1);
  buffers_->WriteAt(idx_, keys, values);
  seq_offset_ += 1;
  AddToEach(offset_, 1);
  idx_ += 1;
  return FetchWindow(*buffers_, seq_offset_, max_size_);
}

Result<CacheState> BatchRotatingKVCache::State() const {
  return MakeBatchState(kBatchRotatingName, *buffers_, seq_offset_, offset_, left_padding_);
}

// Only the buffers and per-row vectors: _offset, _idx and rotated come with
// the meta_state, as upstream.
Status BatchRotatingKVCache::SetState(const CacheState& state) {
  KV_ASSIGN_OR_RETURN(BatchState st, ParseBatchState(kBatchRotatingName, state));
  buffers_->Reset(st.keys, st.values);
  offset_ = std::move(st.offset);
  left_padding_ = std::move(st.left_padding);
  lengths_.reset();
  return Status::OK();
}

MetaState BatchRotatingKVCache::meta_state() const {
  return MetaState::Strings({std::to_string(max_size_), std::to_string(seq_offset_),
                             std::to_string(idx_), rotated_ ? "True" : "False"});
}

Status BatchRotatingKVCache::SetMetaState(const MetaState& meta) {
  if (!meta.is_list() || meta.size() != 4) {
    return BadBatchRotating("meta_state must be [max_size, _offset, _idx, rotated]");
  }
  KV_ASSIGN_OR_RETURN(int64_t max_size, ParseMetaInt(kBatchRotatingName, "max_size", meta[0]));
  KV_ASSIGN_OR_RETURN(int64_t seq_offset, ParseMetaInt(kBatchRotatingName, "_offset", meta[1]));
  KV_ASSIGN_OR_RETURN(int64_t idx, ParseMetaInt(kBatchRotatingName, "_idx", meta[2]));
  if (!meta[3].is_string()) return BadBatchRotating("meta_state rotated is not a string");
  const int64_t rows = buffers_->empty() ? max_size : buffers_->rows();
  if (max_size < 1 || seq_offset < 0 || idx < 0 || idx > std::max(rows, max_size)) {
    return BadBatchRotating("meta_state max_size " + std::to_string(max_size) + ", _offset " +
                            std::to_string(seq_offset) + ", _idx " + std::to_string(idx) +
                            " out of range");
  }
  max_size_ = max_size;
  seq_offset_ = seq_offset;
  idx_ = idx;
  rotated_ = !meta[3].str().empty();  // Python's bool(str): "False" is True (faithful)
  const std::string& text = meta[3].str();
  odd_rotated_text_ = text == "True" || text == "False" ? std::nullopt : std::optional<std::string>(text);
  return Status::OK();
}

Result<CacheState> BatchRotatingKVCache::FullState() const {
  CacheState::List s = MakeBatchFullState(*buffers_, offset_, left_padding_);
  for (int64_t v : {max_size_, seq_offset_, idx_}) s.push_back(CacheState::Int(v));
  s.push_back(CacheState::Bool(rotated_));
  return CacheState(std::move(s));
}

// The meta_state's checks, on a fresh cache.
Status BatchRotatingKVCache::SetFullState(const CacheState& state) {
  KV_RETURN_IF_ERROR(CheckFullState(kBatchRotatingName, state,
                                    {"keys", "values", "offset", "left_padding", "max_size", "_offset", "_idx",
                                     "rotated"}));
  KV_ASSIGN_OR_RETURN(BatchState st, ParseBatchFullState(kBatchRotatingName, state));
  std::vector<std::string> meta;
  for (size_t i : {4, 5, 6}) {
    static constexpr std::string_view kFields[] = {"", "", "", "", "max_size", "_offset", "_idx"};
    KV_ASSIGN_OR_RETURN(int64_t v, FullStateInt(kBatchRotatingName, kFields[i], state[i]));
    meta.push_back(std::to_string(v));
  }
  if (!state[7].is_bool()) return BadBatchRotating("mlx-lm 0.32 state rotated must be a bool, got " + state[7].DebugString());
  meta.push_back(state[7].bool_value() ? "True" : "False");
  BatchRotatingKVCache next(0, {});
  next.buffers_->Reset(st.keys, st.values);
  next.offset_ = std::move(st.offset);
  next.left_padding_ = std::move(st.left_padding);
  KV_RETURN_IF_ERROR(next.SetMetaState(MetaState::Strings(meta)));
  next.rotated_ = state[7].bool_value();
  *this = std::move(next);
  return Status::OK();
}

// mlx-lm writes str(self.rotated), and rotated is only ever a bool.
Status BatchRotatingKVCache::CheckSavedState() const {
  if (!odd_rotated_text_) return Status::OK();
  return Status::InvalidArgument("BatchRotatingKVCache: meta_state rotated \"" + *odd_rotated_text_ +
                                 "\" is not \"True\" or \"False\"");
}

Result<int64_t> BatchRotatingKVCache::Nbytes() const { return buffers_->nbytes(); }

Result<int64_t> BatchRotatingKVCache::Trim(int64_t n) {
  KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimCount(kBatchRotatingName, n, seq_offset_));
  seq_offset_ -= trimmed;
  idx_ -= trimmed;
  AddToEach(offset_, -trimmed);
  return trimmed;
}

Result<Mask> BatchRotatingKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *buffers_, offset_.size()));
  const int64_t w = options.window_size.value_or(0) != 0 ? *options.window_size : max_size_;
  const int64_t o = std::min(max_size_ - 1, seq_offset_);
  const int64_t t = idx_ - max_size_ + (n > 1 ? 1 : 0);
  std::vector<int32_t> lp = left_padding_;
  if (t > 0) AddToEach(lp, -t);
  const bool rot = n == 1 && (rotated_ || idx_ >= max_size_);
  if (rot) AddToEach(lp, -1);
  CausalMaskOptions causal;
  causal.offset = o;
  causal.window_size = w;
  causal.left_padding = std::span<const int32_t>(lp);
  KV_ASSIGN_OR_RETURN(Array mask, CreateCausalMask(n, causal));
  if (rot) {
    const int64_t i = idx_ >= max_size_ ? 0 : idx_;
    mask = mask.Roll(3, i + 1);
  }
  return Mask::FromArray(std::move(mask));
}

Status BatchRotatingKVCache::Prepare(const PrepareArgs& args) {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckLeftPadding(kBatchRotatingName, args, buffers_->empty(), offset_.size()));
  const bool right = HasRightPadding(args);
  if (right && (!args.lengths || args.lengths->size() != offset_.size())) {
    return BadBatchRotating("prepare with right_padding needs lengths for every row");
  }
  ApplyLeftPadding(args, offset_, left_padding_);
  if (right) {
    std::vector<int32_t> lengths(offset_.size());
    for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = (*args.lengths)[i] + offset_[i];
    lengths_ = std::move(lengths);
  }
  return Status::OK();
}

Status BatchRotatingKVCache::Finalize() {
  if (!lengths_) return Status::OK();
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *buffers_, offset_.size()));
  if (buffers_->empty()) return BadBatchRotating("finalize with pending lengths on an empty cache");
  KV_RETURN_IF_ERROR(CheckPending(kBatchRotatingName, "lengths", *lengths_, offset_.size()));
  Array k = buffers_->keys(), v = buffers_->values();
  RollPastLengths(k, v, offset_, left_padding_, *lengths_);
  buffers_->Reset(k, v);
  lengths_.reset();
  return Status::OK();
}

Status BatchRotatingKVCache::Filter(std::span<const int64_t> batch_indices) {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckBatchIndices(kBatchRotatingName, batch_indices, offset_.size()));
  if (!buffers_->empty()) buffers_->Map([&](const Array& a) { return a.Take(0, batch_indices); });
  offset_ = TakeRows(offset_, batch_indices);
  left_padding_ = TakeRows(left_padding_, batch_indices);
  return Status::OK();
}

Status BatchRotatingKVCache::Extend(Cache& other_cache) {
  auto* other = dynamic_cast<BatchRotatingKVCache*>(&other_cache);
  if (other == nullptr) return BadBatchRotating("extend needs another BatchRotatingKVCache");
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *buffers_, offset_.size()));
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *other->buffers_, other->offset_.size()));
  const bool both_empty = buffers_->empty() && other->buffers_->empty();
  // Upstream puts both (the argument too) into temporal order first.
  const bool reorder = !both_empty && (rotated_ != other->rotated_ || idx_ != other->idx_);
  const Ordered mine = TemporalOrder(*buffers_, idx_, reorder && rotated_);
  const Ordered theirs = TemporalOrder(*other->buffers_, other->idx_, reorder && other->rotated_);
  KV_ASSIGN_OR_RETURN(
      ExtendedBatch merged,
      ExtendBatches(
          kBatchRotatingName, BatchSide{mine.keys, mine.values, mine.idx, offset_, left_padding_},
          BatchSide{theirs.keys, theirs.values, theirs.idx, other->offset_, other->left_padding_}));
  if (reorder && other->rotated_) {
    other->buffers_->Reset(theirs.keys, theirs.values);
    other->idx_ = theirs.idx;
    other->rotated_ = false;
  }
  if (merged.keys.defined()) buffers_->Reset(merged.keys, merged.values);
  offset_ = std::move(merged.offset);
  left_padding_ = std::move(merged.left_padding);
  idx_ = merged.idx;
  if (reorder) rotated_ = false;
  if (!both_empty) seq_offset_ = std::max(seq_offset_, other->seq_offset_);
  return Status::OK();
}

Result<std::unique_ptr<Cache>> BatchRotatingKVCache::Extract(int64_t index) const {
  KV_RETURN_IF_ERROR(CheckRowsAgree(kBatchRotatingName, *buffers_, offset_.size()));
  KV_ASSIGN_OR_RETURN(const int64_t row, BatchRow(kBatchRotatingName, index, offset_.size()));
  auto out = std::make_unique<RotatingKVCache>(max_size_, 0);
  if (buffers_->empty()) return std::unique_ptr<Cache>(std::move(out));
  const int64_t pad = std::max<int32_t>(0, left_padding_[row]);
  Array k = buffers_->keys().Slice(0, row, row + 1);
  Array v = buffers_->values().Slice(0, row, row + 1);
  int64_t end = idx_;
  if (rotated_) {
    k = k.Roll(2, -idx_);
    v = v.Roll(2, -idx_);
    end = max_size_;
  }
  k = PySlice(k, 2, pad, end).Clone();
  v = PySlice(v, 2, pad, end).Clone();
  const int64_t kept = k.dim(2);
  KV_RETURN_IF_ERROR(out->SetState(CacheState({k, v})));
  KV_RETURN_IF_ERROR(out->SetMetaState(MetaState::Strings(
      {"0", std::to_string(max_size_), std::to_string(offset_[row]), std::to_string(kept)})));
  return std::unique_ptr<Cache>(std::move(out));
}

Result<std::unique_ptr<BatchRotatingKVCache>> BatchRotatingKVCache::Merge(
    std::span<const Cache* const> caches) {
  KV_ASSIGN_OR_RETURN(std::vector<const RotatingKVCache*> in,
                      Downcast<RotatingKVCache>(kBatchRotatingName, "RotatingKVCache", caches));
  if (in.empty()) return BadBatchRotating("merge of no caches");
  const int64_t max_size = in[0]->max_size();
  std::vector<KeysValues> rows;
  for (const RotatingKVCache* r : in) {
    if (r->max_size() != max_size)
      return BadBatchRotating("merge of caches with different max_size");
    if (r->Empty()) {
      rows.emplace_back();
      continue;
    }
    const int64_t len = r->Size(), off = r->offset().value_or(0);
    const Array k = RotatingTemporalOrder(r->keys_buffer(), r->keep(), r->idx(), off);
    const Array v = RotatingTemporalOrder(r->values_buffer(), r->keep(), r->idx(), off);
    if (k.dim(2) < len) return BadBatchRotating("merge: a cache holds fewer rows than its size");
    rows.push_back({k.Slice(2, k.dim(2) - len, k.dim(2)), v.Slice(2, v.dim(2) - len, v.dim(2))});
  }
  KV_ASSIGN_OR_RETURN(MergedBatch m, MergeBatch(kBatchRotatingName, rows));
  auto out = std::make_unique<BatchRotatingKVCache>(max_size, m.padding);
  if (m.length == 0) return out;
  out->buffers_->Reset(m.keys, m.values);
  for (size_t i = 0; i < in.size(); ++i)
    out->offset_[i] = static_cast<int32_t>(in[i]->offset().value_or(0));
  out->idx_ = m.length;
  out->seq_offset_ = m.length;
  return out;
}

Status BatchRotatingKVCache::DescribeSpec(CacheSpec& spec) const {
  KV_RETURN_IF_ERROR(Cache::DescribeSpec(spec));
  spec.max_size = max_size_;
  return Status::OK();
}

}  // namespace kvstore
