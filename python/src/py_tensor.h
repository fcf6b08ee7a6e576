// kvstore.Tensor and the conversions between Python array objects and
// kvstore::Array.
//
// Into the library (ArrayFromPython), without copying when the bytes are
// C-contiguous and aligned: a kvstore.Tensor, any object with the buffer
// protocol (numpy, memoryview, bytes, MLX arrays, whose BF16 buffers carry
// the format "bfloat16"), or a DLPack producer (__dlpack__, CPU only). The
// Array then keeps the Python buffer alive; it is released under the GIL.
//
// Out of the library, a kvstore.Tensor: read-only, zero-copy (it shares the
// Array's storage, e.g. a file mapping), exported through the buffer
// protocol (read-only) and DLPack (flagged read-only for DLPack >= 1.0
// consumers, a writable copy for legacy ones: see ToDLPack). BF16 has no buffer-protocol format that numpy 1.24
// reads, so its buffer is exported as uint16 bit patterns ("H"); DLPack
// exports it as bfloat16, and `dtype` always says "BF16". The F8 types are
// exported as uint8 and C64 as "Zf".
#ifndef KVSTORE_PYTHON_PY_TENSOR_H_
#define KVSTORE_PYTHON_PY_TENSOR_H_

#include <pybind11/pybind11.h>

#include <optional>
#include <string_view>

#include "kvstore/array.h"

namespace kvstore::python {

class PyTensor {
 public:
  explicit PyTensor(Array array) : array_(std::move(array)) {}
  const Array& array() const { return array_; }

 private:
  Array array_;
};

// ParseDTypeAlias ("BF16", "bf16", "bfloat16", ...), InvalidArgumentError
// for a name it does not know.
DType ParseDTypeName(std::string_view name);

// A Python array object as an Array. `as` reinterprets the elements (same
// element size), e.g. a numpy uint16 array as BF16. Raises
// InvalidArgumentError for unknown formats or sizes, NotSupportedError for
// big-endian buffers or non-CPU DLPack tensors. REQUIRES: the GIL held.
Array ArrayFromPython(pybind11::handle obj, std::optional<DType> as = std::nullopt);

// A new kvstore.Tensor sharing `array`'s storage.
pybind11::object TensorToPython(const Array& array);

void RegisterTensor(pybind11::module_& m);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_TENSOR_H_
