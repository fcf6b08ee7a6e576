// BatchRotatingKVCache: a batched sliding window (spec §10). Faithful to
// mlx-lm, including meta_state's bool("False") == True (docs/compat.md).
#include "kvstore/batch_rotating_kv_cache.h"

#include <algorithm>
#include <string>

#include "kvstore/mask.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/batch_util.h"
#include "libkvstore/cache/cow_buffer.h"
#include "libkvstore/cache/py_slice.h"
#include "libkvstore/cache/rotating_order.h"

namespace kvstore {

struct BatchRotatingKVCache::Buffers {
  CowBuffer keys;
  CowBuffer values;
};

namespace {
constexpr std::string_view kName = "BatchRotatingKVCache";
Status Bad(const std::string& rule) { return Status::InvalidArgument("BatchRotatingKVCache: " + rule); }

Array DropFront(const Array& v, int64_t t) { return t > 0 ? PySlice(v, 2, t, std::nullopt) : v; }

// Concatenation along the sequence axis with MLX's dtype promotion.
Array Append(const Array& v, const Array& tail) {
  const DType d = PromoteFloat(v.dtype(), tail.dtype());
  const Array parts[] = {v.AsType(d).value(), tail.AsType(d).value()};
  return Array::Concatenate(parts, 2);
}
}  // namespace

BatchRotatingKVCache::BatchRotatingKVCache(int64_t max_size, std::vector<int32_t> left_padding)
    : max_size_(max_size), left_padding_(std::move(left_padding)) {
  for (int32_t p : left_padding_) offset_.push_back(-p);
}

std::unique_ptr<Cache> BatchRotatingKVCache::Copy() const {
  auto copy = std::make_unique<BatchRotatingKVCache>(max_size_, left_padding_);
  copy->offset_ = offset_;
  copy->lengths_ = lengths_;
  copy->idx_ = idx_;
  copy->seq_offset_ = seq_offset_;
  copy->rotated_ = rotated_;
  if (buffers_) copy->buffers_ = std::make_shared<Buffers>(*buffers_);
  return copy;
}

Array BatchRotatingKVCache::offsets() const { return Array::FromInt32s(offset_); }
Array BatchRotatingKVCache::left_padding() const { return Array::FromInt32s(left_padding_); }
int64_t BatchRotatingKVCache::Size() const { return std::min(seq_offset_, max_size_); }
bool BatchRotatingKVCache::Empty() const { return buffers_ == nullptr; }

// _temporal_order: unrolls a rotated buffer in place.
static void TemporalOrder(BatchRotatingKVCache::Buffers& b, int64_t& idx, bool& rotated) {
  if (!rotated) return;
  b.keys.Reset(b.keys.array().Roll(2, -idx));
  b.values.Reset(b.values.array().Roll(2, -idx));
  idx = b.keys.array().dim(2);
  rotated = false;
}

// Moves right-padding garbage of rows whose offset passed their length to
// the front (concat path and finalize).
static void RollPastLengths(BatchRotatingKVCache::Buffers& b, std::vector<int32_t>& offset,
                            std::vector<int32_t>& left, const std::vector<int32_t>& lengths) {
  std::vector<int32_t> roll(offset.size());
  for (size_t i = 0; i < offset.size(); ++i) roll[i] = std::max(0, offset[i] - lengths[i]);
  b.keys.Reset(DynamicRoll(b.keys.array(), roll));
  b.values.Reset(DynamicRoll(b.values.array(), roll));
  for (size_t i = 0; i < offset.size(); ++i) {
    left[i] += roll[i];
    offset[i] -= roll[i];
  }
}

Result<KeysValues> BatchRotatingKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(kName, keys, values));
  if (keys.dim(0) != static_cast<int64_t>(offset_.size())) {
    return Bad("update batch " + std::to_string(keys.dim(0)) + " differs from the cache's " +
               std::to_string(offset_.size()) + " rows");
  }
  if (buffers_ != nullptr) {
    const Array& kb = buffers_->keys.array();
    if (kb.dim(1) != keys.dim(1) || kb.dim(3) != keys.dim(3) ||
        buffers_->values.array().dim(3) != values.dim(3)) {
      return Bad("update " + keys.Describe() + " does not fit the cached " + kb.Describe());
    }
  }
  const int64_t s = keys.dim(2);
  const int32_t s32 = static_cast<int32_t>(s);
  if (s != 1) {
    if (buffers_ == nullptr) {
      buffers_ = std::make_shared<Buffers>();
      buffers_->keys.Reset(keys);
      buffers_->values.Reset(values);
    } else {
      TemporalOrder(*buffers_, idx_, rotated_);
      if (buffers_->keys.array().dim(2) > idx_) {
        buffers_->keys.Reset(buffers_->keys.array().Slice(2, 0, idx_));
        buffers_->values.Reset(buffers_->values.array().Slice(2, 0, idx_));
      }
      if (lengths_) RollPastLengths(*buffers_, offset_, left_padding_, *lengths_);
      const int64_t t = idx_ - max_size_ + 1;
      if (t > 0) {
        for (int32_t& p : left_padding_) p -= static_cast<int32_t>(t);
      }
      buffers_->keys.Reset(Append(DropFront(buffers_->keys.array(), t), keys));
      buffers_->values.Reset(Append(DropFront(buffers_->values.array(), t), values));
    }
    for (int32_t& o : offset_) o += s32;
    seq_offset_ += s;
    idx_ = buffers_->keys.array().dim(2);
    return KeysValues{buffers_->keys.array(), buffers_->values.array()};
  }

  if (lengths_) {
    return Status::FailedPrecondition(
        "BatchRotatingKVCache: finalize() the right-padded prefill before decoding");
  }
  const int64_t prev = seq_offset_;
  if (buffers_ == nullptr ||
      (prev >= buffers_->keys.array().dim(2) && buffers_->keys.array().dim(2) < max_size_)) {
    const int64_t new_size = std::min(kStep, max_size_ - prev);
    if (new_size < 0) return Bad("offset beyond max_size with a short buffer");
    if (buffers_ == nullptr) {
      buffers_ = std::make_shared<Buffers>();
      buffers_->keys.Reset(ZeroRows(keys, new_size));
      buffers_->values.Reset(ZeroRows(values, new_size));
    } else {
      buffers_->keys.Reset(Append(buffers_->keys.array(), ZeroRows(keys, new_size)));
      buffers_->values.Reset(Append(buffers_->values.array(), ZeroRows(values, new_size)));
    }
    idx_ = prev;
  }
  const int64_t t = buffers_->keys.array().dim(2) - max_size_;
  if (t > 0) {
    buffers_->keys.Reset(DropFront(buffers_->keys.array(), t));
    buffers_->values.Reset(DropFront(buffers_->values.array(), t));
    idx_ = max_size_;
    for (int32_t& p : left_padding_) p -= static_cast<int32_t>(t);
  }
  if (idx_ == max_size_) {
    rotated_ = true;
    idx_ = 0;
  }
  if (rotated_) {
    for (int32_t& p : left_padding_) p -= s32;
  }
  Array& kb = buffers_->keys.MutableArray();
  Array& vb = buffers_->values.MutableArray();
  Array kdst = PySlice(kb, 2, idx_, idx_ + s);
  if (kdst.dim(2) == s) {
    // Slice assignment casts to the buffer's dtype.
    KV_ASSIGN_OR_RETURN(Array k, keys.AsType(kb.dtype()));
    KV_ASSIGN_OR_RETURN(Array v, values.AsType(vb.dtype()));
    KV_RETURN_IF_ERROR(kdst.CopyFrom(k));
    KV_RETURN_IF_ERROR(PySlice(vb, 2, idx_, idx_ + s).CopyFrom(v));
  }
  seq_offset_ += s;
  for (int32_t& o : offset_) o += s32;
  idx_ += s;
  if (seq_offset_ < max_size_) {
    return KeysValues{PySlice(kb, 2, std::nullopt, seq_offset_), PySlice(vb, 2, std::nullopt, seq_offset_)};
  }
  return KeysValues{kb, vb};
}

Result<CacheState> BatchRotatingKVCache::State() const {
  if (buffers_ == nullptr) return Status::FailedPrecondition("BatchRotatingKVCache: an empty cache has no state");
  const int64_t len = buffers_->keys.array().dim(2);
  const bool cut = seq_offset_ < len;
  const int64_t stop = std::max<int64_t>(0, seq_offset_);
  return CacheState({cut ? buffers_->keys.Snapshot(2, 0, stop) : buffers_->keys.Snapshot(),
                     cut ? buffers_->values.Snapshot(2, 0, stop) : buffers_->values.Snapshot(),
                     offsets(), left_padding()});
}

Status BatchRotatingKVCache::SetState(const CacheState& state) {
  if (!state.is_list() || state.size() != 4) return Bad("state must be [keys, values, offset, left_padding]");
  KV_RETURN_IF_ERROR(CheckKeysValuesState(kName, CacheState({state[0], state[1]})));
  if (!state[2].is_array() || !state[3].is_array()) return Bad("offset and left_padding must be arrays");
  KV_ASSIGN_OR_RETURN(std::vector<int32_t> offset, Int32Values(kName, "offset", state[2].array()));
  KV_ASSIGN_OR_RETURN(std::vector<int32_t> left, Int32Values(kName, "left_padding", state[3].array()));
  const int64_t b = state[0].array().dim(0);
  if (static_cast<int64_t>(offset.size()) != b || static_cast<int64_t>(left.size()) != b) {
    return Bad("offset and left_padding must have one entry per batch row (" + std::to_string(b) + ")");
  }
  auto buffers = std::make_shared<Buffers>();
  buffers->keys.Reset(state[0].array());
  buffers->values.Reset(state[1].array());
  buffers_ = std::move(buffers);
  offset_ = std::move(offset);
  left_padding_ = std::move(left);
  lengths_.reset();
  return Status::OK();
}

MetaState BatchRotatingKVCache::meta_state() const {
  return MetaState::Strings({std::to_string(max_size_), std::to_string(seq_offset_),
                             std::to_string(idx_), rotated_ ? "True" : "False"});
}

Status BatchRotatingKVCache::SetMetaState(const MetaState& meta) {
  if (!meta.is_list() || meta.size() != 4) {
    return Bad("meta_state must be [max_size, _offset, _idx, rotated]");
  }
  KV_ASSIGN_OR_RETURN(int64_t max_size, ParseMetaInt(kName, "max_size", meta[0]));
  KV_ASSIGN_OR_RETURN(int64_t seq_offset, ParseMetaInt(kName, "_offset", meta[1]));
  KV_ASSIGN_OR_RETURN(int64_t idx, ParseMetaInt(kName, "_idx", meta[2]));
  if (!meta[3].is_string()) return Bad("meta_state rotated is not a string");
  const int64_t rows = buffers_ ? buffers_->keys.array().dim(2) : max_size;
  if (max_size < 1 || seq_offset < 0 || idx < 0 || idx > std::max(rows, max_size)) {
    return Bad("meta_state max_size " + std::to_string(max_size) + ", _offset " +
               std::to_string(seq_offset) + ", _idx " + std::to_string(idx) + " out of range");
  }
  max_size_ = max_size;
  seq_offset_ = seq_offset;
  idx_ = idx;
  rotated_ = !meta[3].str().empty();  // Python's bool(str): "False" is True (faithful)
  return Status::OK();
}

Result<int64_t> BatchRotatingKVCache::Nbytes() const {
  if (buffers_ == nullptr) return int64_t{0};
  return static_cast<int64_t>(buffers_->keys.array().nbytes() + buffers_->values.array().nbytes());
}

Result<int64_t> BatchRotatingKVCache::Trim(int64_t n) {
  if (n < 0) return Bad("trim by a negative count");
  const int64_t trimmed = std::min(seq_offset_, n);
  seq_offset_ -= trimmed;
  idx_ -= trimmed;
  for (int32_t& o : offset_) o -= static_cast<int32_t>(trimmed);
  return trimmed;
}

Result<Mask> BatchRotatingKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  const int64_t w = options.window_size.value_or(0) != 0 ? *options.window_size : max_size_;
  const int64_t o = std::min(max_size_ - 1, seq_offset_);
  const int64_t t = idx_ - max_size_ + (n > 1 ? 1 : 0);
  std::vector<int32_t> lp = left_padding_;
  if (t > 0) {
    for (int32_t& p : lp) p -= static_cast<int32_t>(t);
  }
  const bool rot = n == 1 && (rotated_ || idx_ >= max_size_);
  if (rot) {
    for (int32_t& p : lp) p -= 1;
  }
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
  if (args.left_padding) {
    if (buffers_ != nullptr) return Bad("left_padding can only be added to an empty cache");
    if (args.left_padding->size() != left_padding_.size()) return Bad("left_padding has the wrong batch size");
    for (size_t i = 0; i < left_padding_.size(); ++i) {
      left_padding_[i] += (*args.left_padding)[i];
      offset_[i] -= (*args.left_padding)[i];
    }
  }
  if (args.right_padding && !args.right_padding->empty() &&
      *std::max_element(args.right_padding->begin(), args.right_padding->end()) > 0) {
    if (!args.lengths || args.lengths->size() != offset_.size()) {
      return Bad("prepare with right_padding needs lengths for every row");
    }
    std::vector<int32_t> lengths(offset_.size());
    for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = (*args.lengths)[i] + offset_[i];
    lengths_ = std::move(lengths);
  }
  return Status::OK();
}

Status BatchRotatingKVCache::Finalize() {
  if (!lengths_) return Status::OK();
  if (buffers_ == nullptr) return Bad("finalize with pending lengths on an empty cache");
  RollPastLengths(*buffers_, offset_, left_padding_, *lengths_);
  lengths_.reset();
  return Status::OK();
}

Status BatchRotatingKVCache::Filter(std::span<const int64_t> batch_indices) {
  for (int64_t i : batch_indices) {
    if (i < 0 || i >= static_cast<int64_t>(offset_.size())) {
      return Bad("filter index " + std::to_string(i) + " out of range");
    }
  }
  std::vector<int32_t> offset, left;
  for (int64_t i : batch_indices) {
    offset.push_back(offset_[i]);
    left.push_back(left_padding_[i]);
  }
  if (buffers_ != nullptr) {
    buffers_->keys.Reset(buffers_->keys.array().Take(0, batch_indices));
    buffers_->values.Reset(buffers_->values.array().Take(0, batch_indices));
  }
  offset_ = std::move(offset);
  left_padding_ = std::move(left);
  return Status::OK();
}

Status BatchRotatingKVCache::Extend(Cache& other_cache) {
  auto* other = dynamic_cast<BatchRotatingKVCache*>(&other_cache);
  if (other == nullptr) return Bad("extend needs another BatchRotatingKVCache");
  auto concat_ints = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  if (buffers_ == nullptr && other->buffers_ == nullptr) {
    left_padding_ = concat_ints(left_padding_, other->left_padding_);
    offset_ = concat_ints(offset_, other->offset_);
    return Status::OK();
  }
  if (rotated_ != other->rotated_ || idx_ != other->idx_) {
    // Upstream puts both (the argument too) into temporal order first.
    if (buffers_) TemporalOrder(*buffers_, idx_, rotated_);
    if (other->buffers_) TemporalOrder(*other->buffers_, other->idx_, other->rotated_);
  }
  auto side = [](const BatchRotatingKVCache& c) {
    BatchSide s;
    if (c.buffers_) {
      s.keys = c.buffers_->keys.array();
      s.values = c.buffers_->values.array();
    }
    s.rows = static_cast<int64_t>(c.offset_.size());
    s.idx = c.idx_;
    s.left_padding = c.left_padding_;
    return s;
  };
  KV_ASSIGN_OR_RETURN(ExtendedBatch merged, ExtendBatches(kName, side(*this), side(*other)));
  auto buffers = std::make_shared<Buffers>();
  buffers->keys.Reset(merged.keys);
  buffers->values.Reset(merged.values);
  buffers_ = std::move(buffers);
  offset_ = concat_ints(offset_, other->offset_);
  left_padding_ = std::move(merged.left_padding);
  idx_ = merged.idx;
  seq_offset_ = std::max(seq_offset_, other->seq_offset_);
  return Status::OK();
}

Result<std::unique_ptr<Cache>> BatchRotatingKVCache::Extract(int64_t index) const {
  const int64_t b = static_cast<int64_t>(offset_.size());
  if (index < 0) index += b;
  if (index < 0 || index >= b) return Bad("extract index out of range");
  auto out = std::make_unique<RotatingKVCache>(max_size_, 0);
  if (buffers_ == nullptr) return std::unique_ptr<Cache>(std::move(out));
  const int64_t pad = std::max<int32_t>(0, left_padding_[index]);
  Array k = buffers_->keys.array().Slice(0, index, index + 1);
  Array v = buffers_->values.array().Slice(0, index, index + 1);
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
      {"0", std::to_string(max_size_), std::to_string(offset_[index]), std::to_string(kept)})));
  return std::unique_ptr<Cache>(std::move(out));
}

Result<std::unique_ptr<BatchRotatingKVCache>> BatchRotatingKVCache::Merge(std::span<const Cache* const> caches) {
  std::vector<const RotatingKVCache*> in;
  for (const Cache* c : caches) {
    auto* r = dynamic_cast<const RotatingKVCache*>(c);
    if (r == nullptr) return Bad("merge needs RotatingKVCache inputs, got " + std::string(c->class_name()));
    in.push_back(r);
  }
  if (in.empty()) return Bad("merge of no caches");
  const int64_t max_size = in[0]->max_size();
  for (const RotatingKVCache* r : in) {
    if (r->max_size() != max_size) return Bad("merge of caches with different max_size");
  }
  const int64_t n = static_cast<int64_t>(in.size());
  int64_t m = 0;
  for (const RotatingKVCache* r : in) m = std::max(m, r->Size());
  if (m == 0) return std::make_unique<BatchRotatingKVCache>(max_size, std::vector<int32_t>(static_cast<size_t>(n), 0));
  const RotatingKVCache* first = nullptr;
  int64_t h = 0, dk = 0, dv = 0;
  for (const RotatingKVCache* r : in) {
    if (r->Empty()) continue;
    if (first == nullptr) first = r;
    h = std::max(h, r->keys_buffer().dim(1));
    dk = std::max(dk, r->keys_buffer().dim(3));
    dv = std::max(dv, r->values_buffer().dim(3));
  }
  Array keys = Array::Zeros(first->keys_buffer().dtype(), {n, h, m, dk});
  Array values = Array::Zeros(first->values_buffer().dtype(), {n, h, m, dv});
  std::vector<int32_t> padding;
  for (int64_t i = 0; i < n; ++i) {
    const RotatingKVCache* r = in[i];
    const int64_t len = r->Size();
    const int64_t pad = m - len;
    padding.push_back(static_cast<int32_t>(pad));
    if (r->Empty() || len == 0) continue;
    const int64_t off = r->offset().value_or(0);
    Array k = RotatingTemporalOrder(r->keys_buffer(), r->keep(), r->idx(), off);
    Array v = RotatingTemporalOrder(r->values_buffer(), r->keep(), r->idx(), off);
    if (k.dim(2) < len || k.dim(0) != 1 || k.dim(1) != h || k.dim(3) != dk || v.dim(3) != dv ||
        k.dtype() != keys.dtype()) {
      return Bad("merge: cache " + std::to_string(i) + " does not fit " + keys.Describe());
    }
    KV_RETURN_IF_ERROR(keys.Slice(0, i, i + 1).Slice(2, pad, m).CopyFrom(k.Slice(2, k.dim(2) - len, k.dim(2))));
    KV_RETURN_IF_ERROR(values.Slice(0, i, i + 1).Slice(2, pad, m).CopyFrom(v.Slice(2, v.dim(2) - len, v.dim(2))));
  }
  auto out = std::make_unique<BatchRotatingKVCache>(max_size, padding);
  out->buffers_ = std::make_shared<Buffers>();
  out->buffers_->keys.Reset(keys);
  out->buffers_->values.Reset(values);
  for (int64_t i = 0; i < n; ++i) out->offset_[i] = static_cast<int32_t>(in[i]->offset().value_or(0));
  out->idx_ = m;
  out->seq_offset_ = m;
  return out;
}

}  // namespace kvstore
