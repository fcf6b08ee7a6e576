#include "python/src/py_strided.h"

#include <cstring>
#include <string>

#include "python/src/py_errors.h"

namespace kvstore::python {

namespace {

// Copies the elements of a strided block into dense row-major order.
void GatherRowMajor(const std::byte* src, const Shape& shape, std::span<const int64_t> byte_strides,
                    size_t itemsize, size_t dim, std::byte*& dst) {
  if (dim == shape.size()) {
    std::memcpy(dst, src, itemsize);
    dst += itemsize;
    return;
  }
  for (int64_t i = 0; i < shape[dim]; ++i) {
    GatherRowMajor(src + i * byte_strides[dim], shape, byte_strides, itemsize, dim + 1, dst);
  }
}

}  // namespace

void ThrowInvalid(const std::string& message) {
  ThrowStatus(Status::InvalidArgument(message));
}

bool IsRowMajor(const Shape& shape, std::span<const int64_t> byte_strides, size_t itemsize) {
  int64_t expected = static_cast<int64_t>(itemsize);
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && byte_strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Array WrapForeign(DType dtype, const Shape& shape, const std::byte* data,
                  std::span<const int64_t> byte_strides, std::shared_ptr<const void> owner) {
  const int64_t numel = ShapeNumel(shape);
  if (numel < 0) ThrowInvalid("array shape " + ShapeToString(shape) + " is too large");
  const size_t itemsize = DTypeSize(dtype);
  const size_t nbytes = static_cast<size_t>(numel) * itemsize;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % itemsize == 0;
  if (numel > 0 && aligned && IsRowMajor(shape, byte_strides, itemsize)) {
    auto storage = Storage::WrapReadOnly(data, nbytes, std::move(owner));
    return Array::FromStorage(dtype, shape, std::move(storage), 0);
  }
  auto storage = Storage::AllocateUninitialized(nbytes);
  if (numel > 0) {
    std::byte* dst = storage->mutable_data();
    GatherRowMajor(data, shape, byte_strides, itemsize, 0, dst);
  }
  return Array::FromStorage(dtype, shape, std::move(storage), 0);
}

}  // namespace kvstore::python
