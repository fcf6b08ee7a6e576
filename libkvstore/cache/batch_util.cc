#include "libkvstore/cache/batch_util.h"

#include <algorithm>
#include <cassert>
#include <climits>

#include "libkvstore/cache/attention_state.h"

namespace kvstore {

namespace {
Status BatchError(std::string_view cls, const std::string& rule) {
  return Status::InvalidArgument(std::string(cls) + ": " + rule);
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// x padded with `left` zero rows before and `right` after along axis 2.
Array PadRows(const Array& x, int64_t left, int64_t right) {
  if (left == 0 && right == 0) return x;
  const Array parts[] = {ZeroRows(x, left), x, ZeroRows(x, right)};
  return Array::Concatenate(parts, 2);
}
}  // namespace

Array DynamicRoll(const Array& x, const std::vector<int32_t>& shifts) {
  assert(static_cast<int64_t>(shifts.size()) == x.dim(0));
  Array out = Array::Zeros(x.dtype(), x.shape());
  for (int64_t b = 0; b < x.dim(0); ++b) {
    Status s = out.Slice(0, b, b + 1).CopyFrom(x.Slice(0, b, b + 1).Roll(2, shifts[b]));
    (void)s;  // same shapes and dtype by construction
  }
  return out;
}

Result<std::vector<int32_t>> Int32Values(std::string_view cls, std::string_view what,
                                         const Array& a) {
  if (a.ndim() != 1 || !IsIntegral(a.dtype()) || a.dtype() == DType::kBool) {
    return BatchError(cls, std::string(what) + " " + a.Describe() + " must be a 1-D integer array");
  }
  KV_ASSIGN_OR_RETURN(Array i64, a.AsType(DType::kI64));
  std::vector<int32_t> out;
  for (int64_t v : i64.ToVector<int64_t>()) {
    if (v < INT32_MIN || v > INT32_MAX)
      return BatchError(cls, std::string(what) + " value out of int32 range");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

void AddToEach(std::vector<int32_t>& v, int64_t delta) {
  for (int32_t& x : v) x = static_cast<int32_t>(x + delta);
}

Status CheckBatchUpdate(std::string_view cls, const KVBuffers& buffers, size_t rows,
                        const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(buffers.CheckUpdate(cls, keys, values));
  if (keys.dim(0) != static_cast<int64_t>(rows)) {
    return BatchError(cls, "update batch " + std::to_string(keys.dim(0)) +
                               " differs from the cache's " + std::to_string(rows) + " rows");
  }
  return Status::OK();
}

Status CheckPending(std::string_view cls, std::string_view what,
                    const std::vector<int32_t>& pending, size_t rows) {
  if (pending.size() == rows) return Status::OK();
  return Status::FailedPrecondition(std::string(cls) + ": pending " + std::string(what) + " has " +
                                    std::to_string(pending.size()) + " entries for " +
                                    std::to_string(rows) +
                                    " rows (the batch changed since prepare)");
}

Status CheckRowsAgree(std::string_view cls, const KVBuffers& buffers, size_t rows) {
  if (buffers.empty() || buffers.keys().dim(0) == static_cast<int64_t>(rows)) return Status::OK();
  return Status::FailedPrecondition(std::string(cls) + ": offset and left_padding have " + std::to_string(rows) +
                                    " entries for " + std::to_string(buffers.keys().dim(0)) +
                                    " batch rows (a state mlx-lm saves after an update of another batch size: "
                                    "it can be saved and loaded, not operated on per row)");
}

Result<BatchState> ParseBatchState(std::string_view cls, const CacheState& state) {
  if (!state.is_list() || state.size() != 4)
    return BatchError(cls, "state must be [keys, values, offset, left_padding]");
  KV_RETURN_IF_ERROR(CheckKeysValuesState(cls, CacheState({state[0], state[1]})));
  if (!state[2].is_array() || !state[3].is_array())
    return BatchError(cls, "offset and left_padding must be arrays");
  BatchState out{state[0].array(), state[1].array(), {}, {}};
  KV_ASSIGN_OR_RETURN(out.offset, Int32Values(cls, "offset", state[2].array()));
  KV_ASSIGN_OR_RETURN(out.left_padding, Int32Values(cls, "left_padding", state[3].array()));
  if (out.offset.size() != out.left_padding.size()) {
    return BatchError(cls, "offset and left_padding must have one length, got " +
                               std::to_string(out.offset.size()) + " and " +
                               std::to_string(out.left_padding.size()));
  }
  return out;
}

Result<BatchState> ParseBatchFullState(std::string_view cls, const CacheState& state) {
  if (state[0].is_none() && state[1].is_none()) {
    if (!state[2].is_array() || !state[3].is_array())
      return BatchError(cls, "offset and left_padding must be arrays");
    BatchState out;
    KV_ASSIGN_OR_RETURN(out.offset, Int32Values(cls, "offset", state[2].array()));
    KV_ASSIGN_OR_RETURN(out.left_padding, Int32Values(cls, "left_padding", state[3].array()));
    if (out.offset.size() != out.left_padding.size()) {
      return BatchError(cls, "offset and left_padding must have one length");
    }
    return out;
  }
  return ParseBatchState(cls, CacheState({state[0], state[1], state[2], state[3]}));
}

CacheState::List MakeBatchFullState(const KVBuffers& buffers, const std::vector<int32_t>& offset,
                                    const std::vector<int32_t>& left_padding) {
  return {buffers.FullKeys(), buffers.FullValues(), Array::FromInt32s(offset), Array::FromInt32s(left_padding)};
}

Result<CacheState> MakeBatchState(std::string_view cls, const KVBuffers& buffers, int64_t stop,
                                  const std::vector<int32_t>& offset,
                                  const std::vector<int32_t>& left_padding) {
  KV_ASSIGN_OR_RETURN(CacheState kv, buffers.State(cls, stop));
  return CacheState({kv[0], kv[1], Array::FromInt32s(offset), Array::FromInt32s(left_padding)});
}

Status CheckLeftPadding(std::string_view cls, const PrepareArgs& args, bool empty, size_t rows) {
  if (!args.left_padding) return Status::OK();
  if (!empty) return BatchError(cls, "left_padding can only be added to an empty cache");
  if (args.left_padding->size() != rows)
    return BatchError(cls, "left_padding has the wrong batch size");
  return Status::OK();
}

void ApplyLeftPadding(const PrepareArgs& args, std::vector<int32_t>& offset,
                      std::vector<int32_t>& left_padding) {
  if (!args.left_padding) return;
  for (size_t i = 0; i < left_padding.size(); ++i) {
    left_padding[i] += (*args.left_padding)[i];
    offset[i] -= (*args.left_padding)[i];
  }
}

bool HasRightPadding(const PrepareArgs& args) {
  return args.right_padding && !args.right_padding->empty() &&
         *std::max_element(args.right_padding->begin(), args.right_padding->end()) > 0;
}

Status CheckBatchIndices(std::string_view cls, std::span<const int64_t> indices, size_t rows) {
  for (int64_t i : indices) {
    if (i < 0 || i >= static_cast<int64_t>(rows))
      return BatchError(cls, "filter index " + std::to_string(i) + " out of range");
  }
  return Status::OK();
}

std::vector<int32_t> TakeRows(const std::vector<int32_t>& v, std::span<const int64_t> indices) {
  std::vector<int32_t> out;
  for (int64_t i : indices) out.push_back(v[static_cast<size_t>(i)]);
  return out;
}

Result<int64_t> BatchRow(std::string_view cls, int64_t index, size_t rows) {
  const int64_t b = static_cast<int64_t>(rows);
  if (index < 0) index += b;
  if (index < 0 || index >= b) return BatchError(cls, "extract index out of range");
  return index;
}

Result<ExtendedBatch> ExtendBatches(std::string_view cls, const BatchSide& a, const BatchSide& b) {
  ExtendedBatch out{Array(), Array(), Concat(a.offset, b.offset), {}, a.idx};
  if (!a.keys.defined() && !b.keys.defined()) {
    out.left_padding = Concat(a.left_padding, b.left_padding);
    return out;
  }
  const Array& ref_k = a.keys.defined() ? a.keys : b.keys;
  const Array& ref_v = a.values.defined() ? a.values : b.values;
  if (a.keys.defined() && b.keys.defined() &&
      (a.keys.dim(1) != b.keys.dim(1) || a.keys.dim(3) != b.keys.dim(3) ||
       a.values.dim(3) != b.values.dim(3))) {
    return BatchError(cls, "extend of caches with different heads or head dims");
  }
  const int64_t max_idx = std::max(a.idx, b.idx);
  const int64_t max_len =
      std::max(a.keys.defined() ? a.keys.dim(2) : 0, b.keys.defined() ? b.keys.dim(2) : 0);
  struct Justified {
    Array k, v;
    std::vector<int32_t> left;
  };
  auto justify = [&](const BatchSide& side) {
    const int64_t n = static_cast<int64_t>(side.offset.size());
    Array k = side.keys.defined() ? side.keys
                                  : Array::Zeros(DType::kF32, {n, ref_k.dim(1), 0, ref_k.dim(3)});
    Array v = side.values.defined() ? side.values
                                    : Array::Zeros(DType::kF32, {n, ref_v.dim(1), 0, ref_v.dim(3)});
    const int64_t left = max_idx - side.idx;
    int64_t right = max_len - k.dim(2) - left;
    if (right < 0) {
      k = k.Slice(2, 0, std::max<int64_t>(0, k.dim(2) + right));
      v = v.Slice(2, 0, std::max<int64_t>(0, v.dim(2) + right));
      right = 0;
    }
    Justified j{PadRows(k, left, right), PadRows(v, left, right), side.left_padding};
    AddToEach(j.left, left);
    return j;
  };
  Justified x = justify(a), y = justify(b);
  if (x.k.dim(2) != y.k.dim(2))
    return BatchError(cls, "extend of caches whose buffers cannot be aligned");
  const DType kd = PromoteFloat(x.k.dtype(), y.k.dtype()),
              vd = PromoteFloat(x.v.dtype(), y.v.dtype());
  const Array ks[] = {x.k.AsType(kd).value(),
                      y.k.AsType(kd).value()};  // float to float never fails
  const Array vs[] = {x.v.AsType(vd).value(), y.v.AsType(vd).value()};
  out.keys = Array::Concatenate(ks, 0);
  out.values = Array::Concatenate(vs, 0);
  out.left_padding = Concat(std::move(x.left), y.left);
  out.idx = max_idx;
  return out;
}

Result<MergedBatch> MergeBatch(std::string_view cls, std::span<const KeysValues> rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  MergedBatch out;
  const KeysValues* first = nullptr;
  int64_t h = 0, dk = 0, dv = 0;
  for (const KeysValues& r : rows) {
    if (!r.keys.defined()) continue;
    if (first == nullptr) first = &r;
    out.length = std::max(out.length, r.keys.dim(2));
    h = std::max(h, r.keys.dim(1));
    dk = std::max(dk, r.keys.dim(3));
    dv = std::max(dv, r.values.dim(3));
  }
  if (out.length == 0) {
    out.padding.assign(rows.size(), 0);
    return out;
  }
  const DType dtype = first->keys.dtype();
  out.keys = Array::Zeros(dtype, {n, h, out.length, dk});
  out.values = Array::Zeros(dtype, {n, h, out.length, dv});
  for (int64_t i = 0; i < n; ++i) {
    const KeysValues& r = rows[static_cast<size_t>(i)];
    const int64_t len = r.keys.defined() ? r.keys.dim(2) : 0;
    const int64_t pad = out.length - len;
    out.padding.push_back(static_cast<int32_t>(pad));
    if (len == 0) continue;
    if (r.keys.dim(0) != 1 || r.keys.dim(1) != h || r.keys.dim(3) != dk || r.values.dim(3) != dv) {
      return BatchError(cls, "merge: cache " + std::to_string(i) + " " + r.keys.Describe() +
                                 " does not fit " + out.keys.Describe());
    }
    KV_RETURN_IF_ERROR(out.keys.Slice(0, i, i + 1)
                           .Slice(2, pad, out.length)
                           .CopyFrom(r.keys.AsType(dtype).value()));
    KV_RETURN_IF_ERROR(out.values.Slice(0, i, i + 1)
                           .Slice(2, pad, out.length)
                           .CopyFrom(r.values.AsType(dtype).value()));
  }
  return out;
}

}  // namespace kvstore
