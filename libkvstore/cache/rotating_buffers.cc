#include "libkvstore/cache/rotating_buffers.h"

#include <algorithm>
#include <string>

#include "libkvstore/cache/py_slice.h"

namespace kvstore {

Array TrimRows(const Array& v, int64_t keep, int64_t trim, const Array& append) {
  Array out = v;
  if (trim > 0)
    out = ConcatRows({PySlice(v, 2, std::nullopt, keep), PySlice(v, 2, trim + keep, std::nullopt)});
  if (append.defined()) out = ConcatRows({out, append});
  return out;
}

Array RotatingTemporalOrder(const Array& v, int64_t keep, int64_t idx, int64_t offset) {
  if (idx == v.dim(2)) return v;
  if (idx < offset) {
    return ConcatRows({PySlice(v, 2, std::nullopt, keep), PySlice(v, 2, idx, std::nullopt),
                       PySlice(v, 2, keep, idx)});
  }
  return PySlice(v, 2, std::nullopt, idx);
}

Result<RotatingSlot> PlanInPlaceWrite(std::string_view cls, const KVBuffers& buffers,
                                      int64_t offset, int64_t idx, int64_t max_size, int64_t keep,
                                      const Array& keys, const Array& values) {
  RotatingSlot slot{buffers.keys(), buffers.values(), false, idx, 0};
  if (buffers.empty() || (offset >= buffers.rows() && buffers.rows() < max_size)) {
    const int64_t n = std::min(kKVStep, max_size - offset);
    if (n < 0) {
      return Status::FailedPrecondition(
          std::string(cls) + ": offset " + std::to_string(offset) + " exceeds max_size " +
          std::to_string(max_size) + " while the buffer holds fewer rows (upstream raises here)");
    }
    const Array kz = ZeroRows(keys, n), vz = ZeroRows(values, n);
    slot.keys = buffers.empty() ? kz : ConcatRows({slot.keys, kz});
    slot.values = buffers.empty() ? vz : ConcatRows({slot.values, vz});
    slot.replaced = true;
    slot.idx = offset;
  }
  slot.dropped = std::max<int64_t>(0, slot.keys.dim(2) - max_size);
  if (slot.dropped > 0) {
    slot.keys = TrimRows(slot.keys, keep, slot.dropped);
    slot.values = TrimRows(slot.values, keep, slot.dropped);
    slot.replaced = true;
    slot.idx = max_size;
  }
  return slot;
}

KeysValues FetchWindow(const KVBuffers& buffers, int64_t offset, int64_t max_size) {
  return buffers.Fetch(offset < max_size ? offset : buffers.rows());
}

}  // namespace kvstore
