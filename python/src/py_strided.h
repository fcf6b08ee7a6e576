// Helpers shared by the buffer-protocol and DLPack paths of py_tensor.
#ifndef KVSTORE_PYTHON_PY_STRIDED_H_
#define KVSTORE_PYTHON_PY_STRIDED_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstore/array.h"

namespace kvstore::python {

// True when `byte_strides` describe dense row-major elements of `shape`
// (dimensions of extent 1 may have any stride).
bool IsRowMajor(const Shape& shape, std::span<const int64_t> byte_strides, size_t itemsize);

// An Array over foreign bytes: a zero-copy view kept alive by `owner` when
// the elements are row-major and aligned, else a dense copy.
Array WrapForeign(DType dtype, const Shape& shape, const std::byte* data,
                  std::span<const int64_t> byte_strides, std::shared_ptr<const void> owner);

// Raises the kvstore.InvalidArgumentError class (or another by code) from a
// message; used for bad Python input before any library call.
[[noreturn]] void ThrowInvalid(const std::string& message);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_STRIDED_H_
