#include "libkvstore/cache/kv_buffers.h"

#include <algorithm>
#include <cassert>
#include <string>
#include <vector>

#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/py_slice.h"

namespace kvstore {

DType PromoteFloat(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kF64 || b == DType::kF64) return DType::kF64;
  return DType::kF32;
}

Array ConcatRows(std::initializer_list<Array> parts) {
  std::vector<Array> v(parts);
  DType d = v[0].dtype();
  for (const Array& a : v) d = PromoteFloat(d, a.dtype());
  for (Array& a : v) a = a.AsType(d).value();  // float to float never fails
  return Array::Concatenate(v, 2);
}

Array ZeroRows(const Array& like, int64_t rows) {
  return Array::Zeros(like.dtype(), {like.dim(0), like.dim(1), rows, like.dim(3)});
}

Array GrowRows(const Array& buffer, int64_t at, const Array& zeros) {
  const Array kept = at % kKVStep != 0 ? PySlice(buffer, 2, std::nullopt, at) : buffer;
  return ConcatRows({kept, zeros});
}

int64_t KVBuffers::nbytes() const {
  return empty() ? 0 : static_cast<int64_t>(keys().nbytes() + values().nbytes());
}

Status KVBuffers::CheckUpdate(std::string_view cls, const Array& keys, const Array& values) const {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(cls, keys, values));
  if (empty()) return Status::OK();
  const Array& kb = this->keys();
  const Array& vb = this->values();
  if (kb.dim(0) != keys.dim(0) || kb.dim(1) != keys.dim(1) || kb.dim(3) != keys.dim(3) ||
      vb.dim(3) != values.dim(3)) {
    return Status::InvalidArgument(std::string(cls) + ": update " + keys.Describe() + " / " +
                                   values.Describe() + " does not fit the cached " + kb.Describe() +
                                   " / " + vb.Describe());
  }
  return Status::OK();
}

Status KVBuffers::WriteGrowing(std::string_view cls, int64_t at, const Array& keys,
                               const Array& values) {
  KV_RETURN_IF_ERROR(CheckUpdate(cls, keys, values));
  if (at < 0 || at > rows()) {
    return Status::FailedPrecondition(std::string(cls) + ": write position " + std::to_string(at) +
                                      " outside the " + std::to_string(rows()) + " buffered rows");
  }
  const int64_t s = keys.dim(2);
  if (empty() || at + s > rows()) {
    const int64_t n = StepRows(s);
    if (empty()) {
      Reset(ZeroRows(keys, n), ZeroRows(values, n));
    } else {
      Reset(GrowRows(this->keys(), at, ZeroRows(keys, n)),
            GrowRows(this->values(), at, ZeroRows(values, n)));
    }
  }
  WriteAt(at, keys, values);
  return Status::OK();
}

namespace {
void WriteRows(CowBuffer& buffer, int64_t at, const Array& src) {
  const int64_t stop = at + src.dim(2);
  if (PySlice(buffer.array(), 2, at, stop).dim(2) == 0) return;
  Array target = PySlice(buffer.MutableArray(), 2, at, stop);
  const Array cast = src.AsType(target.dtype()).value();  // float to float never fails
  const Status s = target.CopyFrom(cast.Slice(2, 0, target.dim(2)));
  assert(s.ok());  // shapes checked by CheckUpdate
  (void)s;
}
}  // namespace

void KVBuffers::WriteAt(int64_t at, const Array& keys, const Array& values) {
  WriteRows(keys_, at, keys);
  WriteRows(values_, at, values);
}

KeysValues KVBuffers::Fetch(int64_t stop) const {
  const int64_t n = std::clamp<int64_t>(stop, 0, rows());
  return KeysValues{keys().Slice(2, 0, n), values().Slice(2, 0, n)};
}

Result<CacheState> KVBuffers::State(std::string_view cls, int64_t stop) const {
  if (empty())
    return Status::FailedPrecondition(std::string(cls) + ": an empty cache has no state");
  if (stop >= rows()) return CacheState({keys_.Snapshot(), values_.Snapshot()});
  const int64_t n = std::max<int64_t>(0, stop);
  return CacheState({keys_.Snapshot(2, 0, n), values_.Snapshot(2, 0, n)});
}

Status KVBuffers::Restore(std::string_view cls, const CacheState& state) {
  KV_RETURN_IF_ERROR(CheckKeysValuesState(cls, state));
  Reset(state[0].array(), state[1].array());
  return Status::OK();
}

CacheState KVBuffers::FullKeys() const { return empty() ? CacheState::None() : CacheState(keys_.Snapshot()); }
CacheState KVBuffers::FullValues() const { return empty() ? CacheState::None() : CacheState(values_.Snapshot()); }

Status KVBuffers::RestoreFull(std::string_view cls, const CacheState& keys, const CacheState& values) {
  if (keys.is_none() && values.is_none()) {
    Reset(Array(), Array());
    return Status::OK();
  }
  return Restore(cls, CacheState({keys, values}));
}

void KVBuffers::Reset(Array keys, Array values) {
  keys_.Reset(std::move(keys));
  values_.Reset(std::move(values));
}

void KVBuffers::Map(const std::function<Array(const Array&)>& f) { Reset(f(keys()), f(values())); }

}  // namespace kvstore
