// ArraysCache and MambaCache: mlx-lm's slot caches for recurrent layers.
#include "kvstore/arrays_cache.h"

#include <string>

#include "libkvstore/cache/batch_util.h"
#include "libkvstore/cache/kv_buffers.h"

namespace kvstore {

namespace {

Status BadArraysCache(const std::string& rule) {
  return Status::InvalidArgument("ArraysCache: " + rule);
}

std::optional<Array> Int32Vector(const std::vector<int32_t>& v) {
  if (v.empty()) return std::nullopt;
  return Array::FromInt32s(v);
}

Array EmptyPlaceholder() { return Array::Zeros(DType::kF32, {0}); }

// Zeros shaped like `like` with `rows` in axis 0.
Array ZerosRows(const Array& like, int64_t rows) {
  Shape shape = like.shape();
  if (shape.empty())
    shape.push_back(rows);
  else
    shape[0] = rows;
  return Array::Zeros(like.dtype(), shape);
}

// The dtype MLX concatenates two slots to: floats promote (F16 + BF16 ->
// F32), an integer or bool slot with a float slot takes the float. Other
// mixes are refused.
Result<DType> ConcatDType(const Array& a, const Array& b) {
  const DType x = a.dtype(), y = b.dtype();
  if (x == y) return x;
  if (IsFloating(x) && IsFloating(y)) return PromoteFloat(x, y);
  if (IsFloating(x) && IsIntegral(y)) return x;
  if (IsIntegral(x) && IsFloating(y)) return y;
  return BadArraysCache("extend: " + a.Describe() + " and " + b.Describe() + " do not concatenate");
}

// Concatenates two optional batch-major arrays along axis 0, filling a
// missing side with zeros of that side's batch size (upstream's extend rule).
Result<std::optional<Array>> ExtendOptional(const std::optional<Array>& a, int64_t a_batch,
                                            const std::optional<Array>& b, int64_t b_batch) {
  if (!a && !b) return std::optional<Array>();
  const Array left = a ? *a : ZerosRows(*b, a_batch);
  const Array right = b ? *b : ZerosRows(*a, b_batch);
  bool fits = left.ndim() == right.ndim() && left.ndim() > 0;
  for (int d = 1; fits && d < left.ndim(); ++d) fits = left.dim(d) == right.dim(d);
  if (!fits)
    return BadArraysCache("extend: " + left.Describe() + " and " + right.Describe() +
                          " do not concatenate");
  KV_ASSIGN_OR_RETURN(DType dtype, ConcatDType(left, right));
  KV_ASSIGN_OR_RETURN(Array l, left.AsType(dtype));
  KV_ASSIGN_OR_RETURN(Array r, right.AsType(dtype));
  const Array parts[] = {l, r};
  return std::optional<Array>(Array::Concatenate(parts, 0));
}
}  // namespace

ArraysCache::ArraysCache(size_t size, std::vector<int32_t> left_padding)
    : slots_(std::min(size, kMaxSlots)), left_padding_(Int32Vector(left_padding)) {}

// Slot arrays are values: nothing writes into them in place.
std::unique_ptr<Cache> ArraysCache::Copy() const { return std::make_unique<ArraysCache>(*this); }

std::unique_ptr<Cache> MambaCache::Copy() const { return std::make_unique<MambaCache>(*this); }

Status ArraysCache::SetSlot(size_t i, std::optional<Array> value) {
  if (i >= slots_.size()) {
    return BadArraysCache("slot " + std::to_string(i) + " out of range for " +
                          std::to_string(slots_.size()) + " slots");
  }
  slots_[i] = std::move(value);
  return Status::OK();
}

int64_t ArraysCache::batch_size() const {
  for (const auto& s : slots_) {
    if (s && s->ndim() > 0) return s->dim(0);
  }
  if (left_padding_) return left_padding_->numel();
  if (lengths_) return lengths_->numel();
  return 1;
}

Status ArraysCache::Advance(int64_t n) {
  auto sub = [n](const std::optional<Array>& a) -> std::optional<Array> {
    if (!a) return a;
    std::vector<int32_t> v = a->AsType(DType::kI32).value().ToVector<int32_t>();
    for (int32_t& x : v) x = static_cast<int32_t>(x - n);
    return Array::FromValues<int32_t>(DType::kI32, a->shape(), v);
  };
  for (const auto* a : {&lengths_, &left_padding_}) {
    if (*a && !IsIntegral(a->value().dtype()) && !IsFloating(a->value().dtype())) {
      return BadArraysCache("advance: padding arrays must be numeric");
    }
  }
  lengths_ = sub(lengths_);
  left_padding_ = sub(left_padding_);
  return Status::OK();
}

Result<CacheState> ArraysCache::State() const {
  CacheState::List slots;
  for (const auto& s : slots_) slots.push_back(s ? CacheState(*s) : CacheState::None());
  return CacheState({CacheState(std::move(slots)),
                     CacheState(left_padding_ ? *left_padding_ : EmptyPlaceholder()),
                     CacheState(lengths_ ? *lengths_ : EmptyPlaceholder())});
}

namespace {
Result<std::vector<std::optional<Array>>> ParseSlots(const CacheState& list) {
  if (!list.is_list()) return BadArraysCache("state slots must be a list");
  if (list.size() > ArraysCache::kMaxSlots) {
    return BadArraysCache(std::to_string(list.size()) + " slots exceed the limit of " +
                          std::to_string(ArraysCache::kMaxSlots));
  }
  std::vector<std::optional<Array>> slots;
  for (const CacheState& s : list.list()) {
    if (s.is_none())
      slots.emplace_back();
    else if (s.is_array())
      slots.emplace_back(s.array());
    else
      return BadArraysCache("a slot must be an array or None");
  }
  return slots;
}

Result<std::optional<Array>> ParsePadding(const CacheState& s, const char* what) {
  if (!s.is_array()) return BadArraysCache(std::string(what) + " must be an array");
  const Array& a = s.array();
  if (a.numel() == 0) return std::optional<Array>();
  if (a.ndim() != 1 || !(IsIntegral(a.dtype()) || IsFloating(a.dtype()))) {
    return BadArraysCache(std::string(what) + " " + a.Describe() + " must be a 1-D numeric array");
  }
  return std::optional<Array>(a);
}
}  // namespace

Status ArraysCache::SetState(const CacheState& state) {
  if (!state.is_list() || state.size() != 3) {
    return BadArraysCache("state must be [slots, left_padding, lengths] (3 entries), got " +
                          std::to_string(state.size()));
  }
  KV_ASSIGN_OR_RETURN(auto slots, ParseSlots(state[0]));
  KV_ASSIGN_OR_RETURN(auto left, ParsePadding(state[1], "left_padding"));
  KV_ASSIGN_OR_RETURN(auto lengths, ParsePadding(state[2], "lengths"));
  slots_ = std::move(slots);
  left_padding_ = std::move(left);
  lengths_ = std::move(lengths);
  return Status::OK();
}

Status ArraysCache::SetLegacyState(const CacheState& flat_slots) {
  KV_ASSIGN_OR_RETURN(auto slots, ParseSlots(flat_slots));
  slots_ = std::move(slots);
  return Status::OK();
}

Result<CacheState> ArraysCache::FullState() const {
  KV_ASSIGN_OR_RETURN(CacheState state, State());
  return CacheState({state[0], left_padding_ ? CacheState(*left_padding_) : CacheState::None(),
                     lengths_ ? CacheState(*lengths_) : CacheState::None()});
}

Status ArraysCache::SetFullState(const CacheState& state) {
  if (!state.is_list() || state.size() != 3) return SetState(state);  // its error
  return SetState(CacheState({state[0], state[1].is_none() ? CacheState(EmptyPlaceholder()) : state[1],
                              state[2].is_none() ? CacheState(EmptyPlaceholder()) : state[2]}));
}

bool ArraysCache::Empty() const { return slots_.empty() || !slots_[0].has_value(); }

Result<int64_t> ArraysCache::Nbytes() const {
  int64_t n = 0;
  for (const auto& s : slots_) {
    if (s) n += static_cast<int64_t>(s->nbytes());
  }
  return n;
}

Result<Mask> ArraysCache::MakeMask(int64_t n, const MaskOptions&) const {
  const std::optional<Array>& source = left_padding_ ? left_padding_ : lengths_;
  if (!source) return Mask::None();
  KV_ASSIGN_OR_RETURN(Array as_int, source->AsType(DType::kI64));
  const std::vector<int64_t> v = as_int.ToVector<int64_t>();
  const int64_t b = static_cast<int64_t>(v.size());
  std::vector<uint8_t> mask(static_cast<size_t>(b * n));
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      mask[r * n + j] = left_padding_ ? (j >= v[r]) : (j < v[r]);
    }
  }
  return Mask::FromArray(Array::FromValues<uint8_t>(DType::kBool, {b, n}, mask));
}

Status ArraysCache::Prepare(const PrepareArgs& args) {
  if (!args.lengths)
    return BadArraysCache("prepare needs lengths (upstream converts None to an array and fails)");
  lengths_ = Array::FromInt32s(*args.lengths);
  return Status::OK();
}

Status ArraysCache::Finalize() {
  lengths_.reset();
  left_padding_.reset();
  return Status::OK();
}

Status ArraysCache::Filter(std::span<const int64_t> batch_indices) {
  auto check = [&](const Array& a) -> Status {
    for (int64_t i : batch_indices) {
      if (a.ndim() == 0 || i < 0 || i >= a.dim(0)) {
        return BadArraysCache("filter index " + std::to_string(i) + " out of range for " +
                              a.Describe());
      }
    }
    return Status::OK();
  };
  for (const auto& s : slots_) {
    if (s) KV_RETURN_IF_ERROR(check(*s));
  }
  if (left_padding_) KV_RETURN_IF_ERROR(check(*left_padding_));
  if (lengths_) KV_RETURN_IF_ERROR(check(*lengths_));
  for (auto& s : slots_) {
    if (s) s = s->Take(0, batch_indices);
  }
  if (left_padding_) left_padding_ = left_padding_->Take(0, batch_indices);
  if (lengths_) lengths_ = lengths_->Take(0, batch_indices);
  return Status::OK();
}

Status ArraysCache::Extend(Cache& other_cache) {
  auto* other = dynamic_cast<ArraysCache*>(&other_cache);
  if (other == nullptr) return BadArraysCache("extend needs another ArraysCache");
  if (other->slots_.size() != slots_.size()) return BadArraysCache("extend: slot counts differ");
  const int64_t mine = batch_size(), theirs = other->batch_size();
  std::vector<std::optional<Array>> slots(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    KV_ASSIGN_OR_RETURN(slots[i], ExtendOptional(slots_[i], mine, other->slots_[i], theirs));
  }
  KV_ASSIGN_OR_RETURN(auto left, ExtendOptional(left_padding_, mine, other->left_padding_, theirs));
  KV_ASSIGN_OR_RETURN(auto lengths, ExtendOptional(lengths_, mine, other->lengths_, theirs));
  slots_ = std::move(slots);
  left_padding_ = std::move(left);
  lengths_ = std::move(lengths);
  return Status::OK();
}

Result<std::unique_ptr<Cache>> ArraysCache::Extract(int64_t index) const {
  auto out = std::make_unique<ArraysCache>(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i]) return BadArraysCache("extract: slot " + std::to_string(i) + " is None");
    const Array& s = *slots_[i];
    int64_t idx = index < 0 ? index + s.dim(0) : index;
    if (s.ndim() == 0 || idx < 0 || idx >= s.dim(0)) {
      return BadArraysCache("extract index " + std::to_string(index) + " out of range for " +
                            s.Describe());
    }
    out->slots_[i] = s.Slice(0, idx, idx + 1);
  }
  return std::unique_ptr<Cache>(std::move(out));
}

Result<std::unique_ptr<ArraysCache>> ArraysCache::Merge(std::span<const Cache* const> caches) {
  if (caches.empty()) return BadArraysCache("merge of no caches");
  KV_ASSIGN_OR_RETURN(std::vector<const ArraysCache*> in,
                      Downcast<ArraysCache>("ArraysCache", "ArraysCache", caches));
  const size_t n = in[0]->slots_.size();
  const int64_t b = static_cast<int64_t>(in.size());
  auto out = std::make_unique<ArraysCache>(n);
  bool all_empty = true;
  for (size_t e = 0; e < n; ++e) {
    const Array* first = nullptr;
    for (const ArraysCache* c : in) {
      if (e < c->slots_.size() && c->slots_[e]) {
        first = &*c->slots_[e];
        break;
      }
    }
    if (first == nullptr) continue;
    all_empty = false;
    if (first->ndim() == 0)
      return BadArraysCache("merge: slot " + std::to_string(e) + " has rank 0");
    Array merged = ZerosRows(*first, b);
    for (int64_t i = 0; i < b; ++i) {
      const auto& slot = in[i]->slots_.size() > e ? in[i]->slots_[e] : std::nullopt;
      if (!slot) continue;
      Shape want = first->shape();
      want[0] = 1;
      if (slot->shape() != want) {
        return BadArraysCache("merge: slot " + std::to_string(e) + " of cache " +
                              std::to_string(i) + " is " + slot->Describe() +
                              ", expected one row like " + first->Describe());
      }
      // Slice assignment casts to the first cache's dtype, as upstream.
      KV_ASSIGN_OR_RETURN(Array cast, slot->AsType(first->dtype()));
      KV_RETURN_IF_ERROR(merged.Slice(0, i, i + 1).CopyFrom(cast));
    }
    out->slots_[e] = merged;
  }
  if (all_empty)
    out->left_padding_ = Array::FromInt32s(std::vector<int32_t>(static_cast<size_t>(b), 0));
  return out;
}

}  // namespace kvstore
