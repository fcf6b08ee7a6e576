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

int64_t IntArg(py::handle value, const std::string& what, int64_t min, int64_t max) {
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) {
    ThrowStatus(Status::InvalidArgument(what + " must be an int in " + range + ", got " +
                                        std::string(py::str(value.get_type().attr("__name__")))));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || v < min || v > max) {
    ThrowStatus(Status::InvalidArgument(what + " " + std::string(py::str(value)) + " outside " + range));
  }
  return v;
}

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
