// _kvstore.open_for_mlx: the header check that lets kvstore.mlx_lm hand a
// plain mlx-lm file to MLX's own loader by path, and the checks of what MLX
// then returns (python/kvstore/mlx_lm.py).
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/cache_spec.h"
#include "python/src/py_errors.h"
#include "python/src/py_file.h"
#include "python/src/py_tensor.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

using TensorCopy = PromptCacheReader::TensorCopy;

bool PlainLayer(const LayerInfo& layer) {
  const CacheClassInfo* info = FindCacheClass(layer.class_name);
  if (info == nullptr || info->saved_layout_by_release) return false;
  if (!layer.errors.empty() || !layer.unsupported.empty()) return false;
  for (const LayerInfo& child : layer.children) {
    if (!PlainLayer(child)) return false;
  }
  return true;
}

void CollectClasses(const LayerInfo& layer, py::set& out) {
  out.add(py::str(layer.class_name));
  for (const LayerInfo& child : layer.children) CollectClasses(child, out);
}

// An MLX dtype (str() gives "mlx.core.bfloat16") as the library's DType.
DType DTypeOfMlx(py::handle array) {
  std::string name = py::str(array.attr("dtype"));
  if (const size_t dot = name.rfind('.'); dot != std::string::npos) name = name.substr(dot + 1);
  return ParseDTypeName(name);
}

// A file whose header was checked, kept open (mapped) while MLX reads it by path.
class MlxReadCheck {
 public:
  explicit MlxReadCheck(std::unique_ptr<PromptCacheReader> reader) : reader_(std::move(reader)) {}

  // True when the imported mlx-lm's loader reads the file exactly as kvstore
  // would, as far as the header tells: a plain file in mlx-lm's layout, at
  // least one layer (mlx-lm cannot unpack none), every layer valid, no
  // ArraysCache (its layout depends on the mlx-lm version).
  bool mlx_readable() const {
    const PromptCacheInfo& info = reader_->info();
    if (info.compression || info.layout != PromptCacheLayout::kMlxLm || !info.unsupported.empty()) return false;
    if (info.layers.empty()) return false;
    for (const LayerInfo& layer : info.layers) {
      if (!PlainLayer(layer)) return false;
    }
    return true;
  }

  py::set classes() const {
    py::set out;
    for (const LayerInfo& layer : reader_->info().layers) CollectClasses(layer, out);
    return out;
  }

  bool has_digests() const { return reader_->info().has_digests; }

  // mx.load's (arrays, metadata) against the checked header; reads only the
  // arrays' dtypes and shapes, so lazy arrays stay unevaluated.
  bool same_header(const py::dict& metadata, const py::dict& arrays) const {
    Metadata md;
    for (auto [k, v] : metadata) md.emplace_back(py::str(k), py::str(v));
    std::vector<std::string> names;
    std::vector<TensorCopy> copies;
    names.reserve(arrays.size());
    for (auto [name, array] : arrays) {
      names.push_back(py::str(name));
      TensorCopy& copy = copies.emplace_back();
      copy.dtype = DTypeOfMlx(array);
      copy.shape = array.attr("shape").cast<Shape>();
    }
    for (size_t i = 0; i < copies.size(); ++i) copies[i].name = names[i];
    return reader_->SameHeader(md, copies);
  }

  // Hashes the evaluated arrays in MLX memory (both cores, GIL released) and
  // checks them against the file's digests; raises CorruptionError naming
  // the first mismatch.
  void verify_copy(const py::dict& arrays) const {
    std::vector<std::string> names;
    std::vector<Array> held;  // keeps each buffer exported while it is hashed
    std::vector<TensorCopy> copies;
    for (auto [name, array] : arrays) {
      names.push_back(py::str(name));
      held.push_back(ArrayFromPython(array));
    }
    for (size_t i = 0; i < held.size(); ++i) {
      const Array& a = held[i];
      TensorCopy& copy = copies.emplace_back();
      copy.name = names[i];
      copy.dtype = a.dtype();
      copy.shape = a.shape();
      if (a.is_contiguous()) copy.bytes = {a.data(), a.nbytes()};  // else: a mismatch
    }
    Status s;
    {
      py::gil_scoped_release release;
      s = reader_->VerifyCopy(copies);
    }
    ThrowIfError(s);
  }

 private:
  std::unique_ptr<PromptCacheReader> reader_;
};

MlxReadCheck OpenForMlx(const std::filesystem::path& file) {
  const std::string path = UserPath(file);
  auto reader = [&] {
    py::gil_scoped_release release;
    return PromptCacheReader::Open(Env::Default(), path);
  }();
  return MlxReadCheck(Unwrap(std::move(reader)));
}

}  // namespace

void RegisterMlxRead(py::module_& m) {
  py::class_<MlxReadCheck>(m, "MlxReadCheck", R"doc(
A prompt-cache file whose header kvstore checked (kept mapped), for handing the
file to MLX's own loader by path and checking what that loader returns.)doc")
      .def_property_readonly("mlx_readable", &MlxReadCheck::mlx_readable,
                             "True when mlx-lm's loader reads the file as kvstore would (header only).")
      .def_property_readonly("classes", &MlxReadCheck::classes, "The cache class names in the file (a set).")
      .def_property_readonly("has_digests", &MlxReadCheck::has_digests, "True when the file stores digests.")
      .def("same_header", &MlxReadCheck::same_header, py::arg("metadata"), py::arg("arrays"),
           "True when mx.load's metadata and arrays (dtypes, shapes) are the checked header.")
      .def("verify_copy", &MlxReadCheck::verify_copy, py::arg("arrays"),
           "Check the evaluated arrays' bytes and the header against the file's digests.");
  m.def("open_for_mlx", &OpenForMlx, py::arg("path"),
        "Open a prompt-cache file and check its header (kvstore.load's errors), reading no tensor byte.");
}

}  // namespace kvstore::python
