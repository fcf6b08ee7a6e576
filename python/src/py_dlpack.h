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

// What a consumer of __dlpack__ asked for.
struct DLPackRequest {
  bool versioned = false;          // max_version >= (1, 0): a "dltensor_versioned" capsule
  std::optional<bool> copy{};      // the `copy` argument: None, True or False
};

// A capsule for `array`, whose storage the consumer must never write:
//   copy=True: a fresh writable copy (flagged IS_COPIED when versioned);
//   versioned, copy None/False: zero-copy, flagged READ_ONLY;
//   legacy, copy None: a fresh writable copy (a legacy capsule cannot say
//     read-only, and a consumer writing to a file mapping would crash);
//   legacy, copy False: BufferError.
// The capsule keeps what it views alive until the consumer's deleter runs.
pybind11::capsule ToDLPack(const Array& array, const DLPackRequest& request);

// A legacy zero-copy capsule over read-only storage, for consumers known to
// copy what they import (MLX's mx.array). Not exposed as __dlpack__.
pybind11::capsule ToDLPackView(const Array& array);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_DLPACK_H_
