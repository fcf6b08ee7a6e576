#include "python/src/py_errors.h"

#include <string>

#include "kvstore/redis_backend.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

const char* ExceptionName(StatusCode code) {
  switch (code) {
    case StatusCode::kCorruption:
    case StatusCode::kResourceExhausted: return "CorruptionError";
    case StatusCode::kNotSupported: return "NotSupportedError";
    case StatusCode::kFailedPrecondition: return "FailedPreconditionError";
    case StatusCode::kInvalidArgument: return "InvalidArgumentError";
    case StatusCode::kNotFound: return "NotFoundError";
    case StatusCode::kIOError: return "FileIOError";
    case StatusCode::kPermissionDenied: return "PermissionDeniedError";
    default: return "Error";
  }
}

}  // namespace

void ThrowStatus(const Status& status) {
  py::object errors = py::module_::import("kvstore.errors");
  py::object cls = errors.attr(ExceptionName(status.code()));
  // A message may quote a URL a user passed in, with its password.
  py::object exc = cls(RedactCredentials(status.message()));
  exc.attr("code") = std::string(StatusCodeName(status.code()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

}  // namespace kvstore::python
