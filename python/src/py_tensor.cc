#include "python/src/py_tensor.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "python/src/dlpack.h"
#include "python/src/py_dlpack.h"
#include "python/src/py_errors.h"
#include "python/src/py_strided.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

// A Py_buffer that is released (under the GIL) when the last Array viewing
// it goes away.
struct BufferOwner {
  Py_buffer view{};
  ~BufferOwner() {
    py::gil_scoped_acquire gil;
    PyBuffer_Release(&view);
  }
};

// The DType of a struct-module format string (PEP 3118) of `itemsize` bytes.
DType DTypeFromFormat(std::string_view format, size_t itemsize) {
  if (format == "bfloat16") return DType::kBF16;  // MLX's spelling
  if (!format.empty() && std::string_view("@=<>!").find(format[0]) != std::string_view::npos) {
    if ((format[0] == '>' || format[0] == '!') && itemsize > 1) {
      ThrowStatus(Status::NotSupported("big-endian buffer (format '" + std::string(format) +
                                       "'): convert it to little-endian first"));
    }
    format.remove_prefix(1);
  }
  const auto by_size = [&](DType four, DType eight) {
    if (itemsize == 4) return four;
    if (itemsize == 8) return eight;
    ThrowInvalid("buffer format '" + std::string(format) + "' with item size " +
                 std::to_string(itemsize) + " has no kvstore dtype");
  };
  if (format == "?") return DType::kBool;
  if (format == "b") return DType::kI8;
  if (format == "B") return DType::kU8;
  if (format == "h") return DType::kI16;
  if (format == "H") return DType::kU16;
  if (format == "i" || format == "l" || format == "q") return by_size(DType::kI32, DType::kI64);
  if (format == "I" || format == "L" || format == "Q") return by_size(DType::kU32, DType::kU64);
  if (format == "e") return DType::kF16;
  if (format == "f") return DType::kF32;
  if (format == "d") return DType::kF64;
  if (format == "Zf") return DType::kC64;
  ThrowInvalid("buffer format '" + std::string(format) + "' has no kvstore dtype");
}

// The format a Tensor's buffer is exported with (see the header on BF16).
std::string BufferFormat(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "?";
    case DType::kI8: return "b";
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kF8E8M0: return "B";
    case DType::kI16: return "h";
    case DType::kU16:
    case DType::kBF16: return "H";
    case DType::kI32: return "i";
    case DType::kU32: return "I";
    case DType::kI64: return "q";
    case DType::kU64: return "Q";
    case DType::kF16: return "e";
    case DType::kF32: return "f";
    case DType::kF64: return "d";
    case DType::kC64: return "Zf";
  }
  return "B";
}

Array FromBuffer(py::handle obj, std::optional<DType> as) {
  auto owner = std::make_shared<BufferOwner>();
  if (PyObject_GetBuffer(obj.ptr(), &owner->view, PyBUF_RECORDS_RO) != 0) throw py::error_already_set();
  const Py_buffer& v = owner->view;
  const size_t itemsize = static_cast<size_t>(v.itemsize);
  const DType dtype = as ? *as : DTypeFromFormat(v.format ? v.format : "B", itemsize);
  if (DTypeSize(dtype) != itemsize) {
    ThrowInvalid("buffer items of " + std::to_string(itemsize) + " bytes cannot be " +
                 std::string(DTypeName(dtype)));
  }
  Shape shape(v.shape, v.shape + v.ndim);
  std::vector<int64_t> strides(v.strides, v.strides + v.ndim);
  if (v.suboffsets != nullptr) ThrowInvalid("indirect (PIL-style) buffers are not supported");
  return WrapForeign(dtype, shape, static_cast<const std::byte*>(v.buf), strides, owner);
}

py::capsule TensorDLPack(const PyTensor& t, const py::object& /*stream*/, const py::object& max_version,
                         const py::object& dl_device, std::optional<bool> copy) {
  if (!dl_device.is_none()) {
    const auto device = dl_device.cast<std::pair<int, int>>();
    if (device.first != dlpack::kDLCPU || device.second != 0) {
      PyErr_SetString(PyExc_BufferError, "kvstore.Tensor.__dlpack__: only the CPU device (1, 0) is supported");
      throw py::error_already_set();
    }
  }
  DLPackRequest request{.copy = copy};
  if (!max_version.is_none()) request.versioned = max_version.cast<std::pair<int, int>>().first >= 1;
  return ToDLPack(t.array(), request);
}

}  // namespace

DType ParseDTypeName(std::string_view name) {
  if (std::optional<DType> dtype = ParseDTypeAlias(name)) return *dtype;
  ThrowInvalid("unknown dtype '" + std::string(name) + "'");
}

Array ArrayFromPython(py::handle obj, std::optional<DType> as) {
  if (py::isinstance<PyTensor>(obj)) {
    const Array& a = obj.cast<const PyTensor&>().array();
    if (!as || *as == a.dtype()) return a;
    if (DTypeSize(*as) != a.itemsize()) ThrowInvalid("cannot reinterpret " + a.Describe() + " as " + std::string(DTypeName(*as)));
    const Array dense = a.Contiguous();
    return Array::FromStorage(*as, a.shape(), dense.storage(), dense.byte_offset());
  }
  if (PyObject_CheckBuffer(obj.ptr())) return FromBuffer(obj, as);
  if (py::hasattr(obj, "__dlpack__")) return FromDLPack(obj, as);
  throw py::type_error("expected an array (buffer protocol or __dlpack__), got " +
                       std::string(py::str(obj.get_type().attr("__name__"))));
}

py::object TensorToPython(const Array& array) { return py::cast(PyTensor(array)); }

void RegisterTensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor", py::buffer_protocol(), R"doc(
A read-only n-dimensional array over kvstore storage (often a file mapping).
Zero-copy through the buffer protocol (BF16 as uint16 bit patterns) and DLPack.
Tensor(obj, dtype=None) wraps a buffer-protocol or DLPack object without
copying; dtype reinterprets elements of the same size (e.g. uint16 as "BF16").)doc")
      .def(py::init([](const py::object& obj, std::optional<std::string> dtype) {
             std::optional<DType> as;
             if (dtype) as = ParseDTypeName(*dtype);
             return PyTensor(ArrayFromPython(obj, as));
           }),
           py::arg("obj"), py::arg("dtype") = py::none(),
           "Wrap a buffer-protocol or DLPack object without copying; dtype (e.g. \"BF16\") reinterprets it.")
      .def_buffer([](PyTensor& t) {
        const Array& a = t.array();
        std::vector<py::ssize_t> shape(a.shape().begin(), a.shape().end());
        std::vector<py::ssize_t> strides;
        for (int64_t s : a.strides()) strides.push_back(static_cast<py::ssize_t>(s * a.itemsize()));
        return py::buffer_info(const_cast<std::byte*>(a.data()), static_cast<py::ssize_t>(a.itemsize()),
                               BufferFormat(a.dtype()), a.ndim(), shape, strides, /*readonly=*/true);
      })
      .def_property_readonly(
          "dtype", [](const PyTensor& t) { return std::string(DTypeName(t.array().dtype())); },
          "The element type as safetensors names it: \"F16\", \"BF16\", \"F32\", \"U32\", ...")
      .def_property_readonly(
          "shape", [](const PyTensor& t) { return py::tuple(py::cast(t.array().shape())); },
          "The dimensions (tuple of int).")
      .def_property_readonly("ndim", [](const PyTensor& t) { return t.array().ndim(); }, "The number of dimensions.")
      .def_property_readonly("itemsize", [](const PyTensor& t) { return t.array().itemsize(); },
                             "Bytes per element.")
      .def_property_readonly("nbytes", [](const PyTensor& t) { return t.array().nbytes(); },
                             "Bytes of all elements (itemsize times the element count).")
      .def(
          "tobytes",
          [](const PyTensor& t) {
            std::vector<std::byte> bytes = t.array().ToBytes();
            return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          "A copy of the elements in C order (bytes; BF16 as its bit patterns).")
      .def("astype", [](const PyTensor& t, const std::string& dtype) {
        return PyTensor(Unwrap(t.array().AsType(ParseDTypeName(dtype))));
      }, py::arg("dtype"), "A converted copy (F16, BF16, F32, F64 and integer types).")
      // CPU memory needs no stream. Never a writable pointer into read-only
      // storage: see ToDLPack.
      .def("__dlpack__", &TensorDLPack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
           "A DLPack capsule (CPU only): zero-copy and read-only for DLPack >= 1.0 consumers, a copy for "
           "legacy ones (docs/python.md, DLPack).")
      .def("_dlpack_view", [](const PyTensor& t) { return ToDLPackView(t.array()); },
           "A zero-copy legacy DLPack capsule for consumers that copy what they import (mx.array).")
      .def("__dlpack_device__", [](const PyTensor&) { return py::make_tuple(dlpack::kDLCPU, 0); },
           "(1, 0): the CPU, DLPack's device of every kvstore tensor.")
      .def("__repr__", [](const PyTensor& t) { return "kvstore.Tensor(" + t.array().Describe() + ")"; });
}

}  // namespace kvstore::python
