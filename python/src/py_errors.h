// Status -> Python exception, following kvtool's exit codes (docs/python.md):
// Corruption/ResourceExhausted -> kvstore.CorruptionError (exit 3),
// NotSupported/FailedPrecondition -> kvstore.NotSupportedError (exit 4),
// InvalidArgument -> kvstore.InvalidArgumentError (a ValueError, exit 1),
// NotFound -> kvstore.NotFoundError (a FileNotFoundError, exit 2),
// IOError -> kvstore.FileIOError (an OSError, exit 2),
// PermissionDenied -> kvstore.PermissionDeniedError (a PermissionError, exit 2),
// Internal -> kvstore.Error. Credentials of URLs in messages are redacted.
// The classes live in kvstore/errors.py.
#ifndef KVSTORE_PYTHON_PY_ERRORS_H_
#define KVSTORE_PYTHON_PY_ERRORS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>

#include "kvstore/status.h"

namespace kvstore::python {

// Raises the Python exception for `status`. REQUIRES: !status.ok(); the GIL held.
[[noreturn]] void ThrowStatus(const Status& status);

// A Python int argument in [min, max] (bool is not an int here); else
// InvalidArgumentError naming `what` and the range. REQUIRES: the GIL held.
int64_t IntArg(pybind11::handle value, const std::string& what, int64_t min, int64_t max);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_ERRORS_H_
