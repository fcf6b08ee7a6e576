// kvstore._kvstore.ModelFingerprint: the model fingerprint the disk and
// shared tiers of TieredPromptCache key and check their entries by.
#include <pybind11/stl.h>

#include <string>

#include "kvstore/model_fingerprint.h"
#include "python/src/py_errors.h"
#include "python/src/py_layer.h"
#include "python/src/py_tiers.h"

namespace py = pybind11;

namespace kvstore::python {

void RegisterModelFingerprint(py::module_& m) {
  py::class_<ModelFingerprint>(m, "ModelFingerprint", R"doc(
Internal (used by kvstore.mlx_lm.TieredPromptCache). What makes two prompt
caches interchangeable: a model id plus, per layer, the cache class, dtype, KV
heads, head dims, quantization, window and chunk sizes
(kvstore/model_fingerprint.h). Immutable.)doc")
      .def_static(
          "of",
          [](const std::string& model_id, const py::object& layers) {
            return Unwrap(ModelFingerprint::Of(model_id, LayersFromPython(layers)));
          },
          py::arg("model_id"), py::arg("layers"),
          "The fingerprint of the model that produced `layers` (kvstore.Layer objects or "
          "(class_name, state, meta_state) tuples); NotSupportedError when a layer cannot tell "
          "its shapes (an empty cache).")
      .def_static(
          "from_json", [](const std::string& json) { return Unwrap(ModelFingerprint::FromJson(json)); },
          py::arg("json"))
      .def_property_readonly("model_id", &ModelFingerprint::model_id)
      .def_property_readonly("json", &ModelFingerprint::json)
      .def_property_readonly("digest", [](const ModelFingerprint& f) { return f.digest().ToHex(); })
      .def("difference_from", &ModelFingerprint::DifferenceFrom, py::arg("other"),
           "The first difference from `other` (this first), or '' when equal.")
      .def("__eq__", [](const ModelFingerprint& a, const ModelFingerprint& b) { return a == b; }, py::arg("other"))
      .def("__hash__", [](const ModelFingerprint& f) { return py::hash(py::str(f.digest().ToHex())); })
      .def("__repr__", [](const ModelFingerprint& f) { return "kvstore.ModelFingerprint(" + f.json() + ")"; });
}

}  // namespace kvstore::python
