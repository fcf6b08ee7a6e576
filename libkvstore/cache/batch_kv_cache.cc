// BatchKVCache: a left-padded batch of growing caches (spec §9).
#include "kvstore/batch_kv_cache.h"

#include <algorithm>
#include <string>

#include "kvstore/kv_cache.h"
#include "kvstore/mask.h"
#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/batch_util.h"
#include "libkvstore/cache/cow_buffer.h"

namespace kvstore {

struct BatchKVCache::Buffers {
  CowBuffer keys;
  CowBuffer values;
};

namespace {
constexpr std::string_view kName = "BatchKVCache";
Status Bad(const std::string& rule) { return Status::InvalidArgument("BatchKVCache: " + rule); }
}  // namespace

BatchKVCache::BatchKVCache(std::vector<int32_t> left_padding) : left_padding_(std::move(left_padding)) {
  for (int32_t p : left_padding_) offset_.push_back(-p);
}

std::unique_ptr<Cache> BatchKVCache::Copy() const {
  auto copy = std::make_unique<BatchKVCache>(left_padding_);
  copy->offset_ = offset_;
  copy->right_padding_ = right_padding_;
  copy->idx_ = idx_;
  if (buffers_) copy->buffers_ = std::make_shared<Buffers>(*buffers_);
  return copy;
}

Array BatchKVCache::offsets() const { return Array::FromInt32s(offset_); }
Array BatchKVCache::left_padding() const { return Array::FromInt32s(left_padding_); }
bool BatchKVCache::Empty() const { return buffers_ == nullptr; }

Result<KeysValues> BatchKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
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
  const int64_t prev = idx_;
  const int64_t s = keys.dim(2);
  if (buffers_ == nullptr || prev + s > buffers_->keys.array().dim(2)) {
    const int64_t rows = (s + kStep - 1) / kStep * kStep;
    auto grow = [&](const CowBuffer& b, const Array& like) {
      if (!b.defined()) return ZeroRows(like, rows);
      Array kept = prev % kStep != 0 ? b.array().Slice(2, 0, prev) : b.array();
      const Array parts[] = {kept, ZeroRows(like, rows)};
      return Array::Concatenate(parts, 2);
    };
    if (buffers_ == nullptr) buffers_ = std::make_shared<Buffers>();
    buffers_->keys.Reset(grow(buffers_->keys, keys));
    buffers_->values.Reset(grow(buffers_->values, values));
  }
  // Slice assignment casts to the buffer's dtype.
  KV_ASSIGN_OR_RETURN(Array k, keys.AsType(buffers_->keys.array().dtype()));
  KV_ASSIGN_OR_RETURN(Array v, values.AsType(buffers_->values.array().dtype()));
  KV_RETURN_IF_ERROR(buffers_->keys.Write(2, prev, k));
  KV_RETURN_IF_ERROR(buffers_->values.Write(2, prev, v));
  for (int32_t& o : offset_) o += static_cast<int32_t>(s);
  idx_ = prev + s;
  return KeysValues{buffers_->keys.array().Slice(2, 0, idx_), buffers_->values.array().Slice(2, 0, idx_)};
}

Result<CacheState> BatchKVCache::State() const {
  if (buffers_ == nullptr) return Status::FailedPrecondition("BatchKVCache: an empty cache has no state");
  const bool full = idx_ == buffers_->keys.array().dim(2);
  return CacheState({full ? buffers_->keys.Snapshot() : buffers_->keys.Snapshot(2, 0, idx_),
                     full ? buffers_->values.Snapshot() : buffers_->values.Snapshot(2, 0, idx_),
                     offsets(), left_padding()});
}

Status BatchKVCache::SetState(const CacheState& state) {
  if (!state.is_list() || state.size() != 4) {
    return Bad("state must be [keys, values, offset, left_padding]");
  }
  const CacheState kv({state[0], state[1]});
  KV_RETURN_IF_ERROR(CheckKeysValuesState(kName, kv));
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
  idx_ = state[0].array().dim(2);
  right_padding_.reset();  // not restored upstream either; start clean
  return Status::OK();
}

Result<int64_t> BatchKVCache::Nbytes() const {
  if (buffers_ == nullptr) return int64_t{0};
  return static_cast<int64_t>(buffers_->keys.array().nbytes() + buffers_->values.array().nbytes());
}

Result<int64_t> BatchKVCache::Trim(int64_t n) {
  if (n < 0) return Bad("trim by a negative count");
  const int64_t trimmed = std::min(idx_, n);
  idx_ -= trimmed;
  for (int32_t& o : offset_) o -= static_cast<int32_t>(trimmed);
  return trimmed;
}

Result<Mask> BatchKVCache::MakeMask(int64_t n, const MaskOptions& options) const {
  CausalMaskOptions causal;
  causal.offset = idx_;
  causal.window_size = options.window_size;
  causal.left_padding = std::span<const int32_t>(left_padding_);
  KV_ASSIGN_OR_RETURN(Array mask, CreateCausalMask(n, causal));
  return Mask::FromArray(std::move(mask));
}

Status BatchKVCache::Prepare(const PrepareArgs& args) {
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
    if (args.right_padding->size() != offset_.size()) return Bad("right_padding has the wrong batch size");
    right_padding_ = *args.right_padding;
  }
  return Status::OK();
}

Status BatchKVCache::Finalize() {
  if (!right_padding_) return Status::OK();
  if (buffers_ == nullptr) return Bad("finalize with right padding on an empty cache");
  const std::vector<int32_t> pad = *right_padding_;
  buffers_->keys.Reset(DynamicRoll(buffers_->keys.array(), pad));
  buffers_->values.Reset(DynamicRoll(buffers_->values.array(), pad));
  for (size_t i = 0; i < pad.size(); ++i) {
    offset_[i] -= pad[i];
    left_padding_[i] += pad[i];
  }
  right_padding_.reset();
  return Status::OK();
}

Status BatchKVCache::Filter(std::span<const int64_t> batch_indices) {
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
  if (!left_padding_.empty()) {
    const int32_t m = *std::min_element(left_padding_.begin(), left_padding_.end());
    if (m > 0 && buffers_ != nullptr) {
      buffers_->keys.Reset(buffers_->keys.array().Slice(2, std::min<int64_t>(m, buffers_->keys.array().dim(2)),
                                                        buffers_->keys.array().dim(2)));
      buffers_->values.Reset(buffers_->values.array().Slice(
          2, std::min<int64_t>(m, buffers_->values.array().dim(2)), buffers_->values.array().dim(2)));
      idx_ -= m;
      for (int32_t& p : left_padding_) p -= m;
    }
  }
  return Status::OK();
}

Status BatchKVCache::Extend(Cache& other_cache) {
  auto* other = dynamic_cast<BatchKVCache*>(&other_cache);
  if (other == nullptr) return Bad("extend needs another BatchKVCache");
  auto concat_ints = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  if (buffers_ == nullptr && other->buffers_ == nullptr) {
    left_padding_ = concat_ints(left_padding_, other->left_padding_);
    offset_ = concat_ints(offset_, other->offset_);
    return Status::OK();
  }
  auto side = [](const BatchKVCache& c) {
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
  return Status::OK();
}

Result<std::unique_ptr<Cache>> BatchKVCache::Extract(int64_t index) const {
  const int64_t b = static_cast<int64_t>(offset_.size());
  if (index < 0) index += b;
  if (index < 0 || index >= b) return Bad("extract index out of range");
  auto out = std::make_unique<KVCache>();
  if (buffers_ == nullptr) return std::unique_ptr<Cache>(std::move(out));
  const int64_t start = std::clamp<int64_t>(left_padding_[index], 0, idx_);
  Array k = buffers_->keys.array().Slice(0, index, index + 1).Slice(2, start, idx_).Clone();
  Array v = buffers_->values.array().Slice(0, index, index + 1).Slice(2, start, idx_).Clone();
  KV_RETURN_IF_ERROR(out->SetState(CacheState({k, v})));
  return std::unique_ptr<Cache>(std::move(out));
}

Result<std::unique_ptr<BatchKVCache>> BatchKVCache::Merge(std::span<const Cache* const> caches) {
  std::vector<const KVCache*> in;
  for (const Cache* c : caches) {
    auto* kv = dynamic_cast<const KVCache*>(c);
    if (kv == nullptr) return Bad("merge needs KVCache inputs, got " + std::string(c->class_name()));
    in.push_back(kv);
  }
  const int64_t n = static_cast<int64_t>(in.size());
  int64_t m = 0;
  for (const KVCache* c : in) m = std::max(m, c->Size());
  if (m == 0) return std::make_unique<BatchKVCache>(std::vector<int32_t>(static_cast<size_t>(n), 0));
  const KVCache* first = nullptr;
  int64_t h = 0, dk = 0, dv = 0;
  for (const KVCache* c : in) {
    if (c->Empty()) continue;
    if (first == nullptr) first = c;
    h = std::max(h, c->keys_buffer().dim(1));
    dk = std::max(dk, c->keys_buffer().dim(3));
    dv = std::max(dv, c->values_buffer().dim(3));
  }
  Array keys = Array::Zeros(first->keys_buffer().dtype(), {n, h, m, dk});
  Array values = Array::Zeros(first->values_buffer().dtype(), {n, h, m, dv});
  std::vector<int32_t> padding;
  for (int64_t i = 0; i < n; ++i) {
    const KVCache* c = in[i];
    const int64_t len = c->Size();
    const int64_t pad = m - len;
    padding.push_back(static_cast<int32_t>(pad));
    if (c->Empty() || len == 0) continue;
    const Array& kb = c->keys_buffer();
    const Array& vb = c->values_buffer();
    if (kb.dim(0) != 1 || kb.dim(1) != h || kb.dim(3) != dk || vb.dim(3) != dv ||
        kb.dtype() != keys.dtype() || vb.dtype() != values.dtype()) {
      return Bad("merge: cache " + std::to_string(i) + " " + kb.Describe() + " does not fit " + keys.Describe());
    }
    KV_RETURN_IF_ERROR(keys.Slice(0, i, i + 1).Slice(2, pad, pad + len).CopyFrom(kb.Slice(2, 0, len)));
    KV_RETURN_IF_ERROR(values.Slice(0, i, i + 1).Slice(2, pad, pad + len).CopyFrom(vb.Slice(2, 0, len)));
  }
  auto out = std::make_unique<BatchKVCache>(padding);
  out->buffers_ = std::make_shared<Buffers>();
  out->buffers_->keys.Reset(keys);
  out->buffers_->values.Reset(values);
  for (size_t i = 0; i < padding.size(); ++i) out->offset_[i] = static_cast<int32_t>(m) - padding[i];
  out->idx_ = m;
  return out;
}

}  // namespace kvstore
