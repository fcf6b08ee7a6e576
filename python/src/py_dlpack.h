// DLPack import and export for kvstore.Tensor (see py_tensor.h).
#ifndef KVSTORE_PYTHON_PY_DLPACK_H_
#define KVSTORE_PYTHON_PY_DLPACK_H_

#include <pybind11/pybind11.h>

#include <optional>

#include "kvstore/array.h"

namespace kvstore::python {

// Consumes obj.__dlpack__(): a zero-copy view when row-major and aligned.
// NotSupportedError for non-CPU tensors and vector lanes.
Array FromDLPack(pybind11::handle obj, std::optional<DType> as);

// A "dltensor" capsule viewing `array` (kept alive until the consumer's deleter runs).
pybind11::capsule ToDLPack(const Array& array);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_DLPACK_H_
