#include "python/src/py_layer.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "python/src/py_errors.h"
#include "python/src/py_strided.h"
#include "python/src/py_tree.h"

namespace py = pybind11;

namespace kvstore::python {

PyLayer::PyLayer(std::shared_ptr<Cache> cache) : cache_(std::move(cache)) {
  state_ = StateToPython(Unwrap(cache_->State()));
  meta_state_ = MetaToPython(cache_->meta_state());
}

py::list LayersToPython(const PromptCache& cache) {
  py::list out;
  for (const auto& layer : cache) out.append(py::cast(PyLayer(layer)));
  return out;
}

PromptCache LayersFromPython(py::handle layers) {
  if (py::hasattr(layers, "layers") && !py::isinstance<py::list>(layers)) layers = layers.attr("layers");
  if (!py::isinstance<py::iterable>(layers) || py::isinstance<py::str>(layers)) {
    ThrowInvalid("layers must be a list of layers (kvstore.Layer or (class_name, state, meta_state)), got " +
                 std::string(py::str(layers.get_type().attr("__name__"))));
  }
  PromptCache out;
  for (py::handle layer : layers) out.push_back(CacheFromPython(layer));
  return out;
}

void RegisterLayer(py::module_& m) {
  py::class_<PyLayer>(m, "Layer", R"doc(
One cache layer: class_name, meta_state (nested lists of str) and state
(nested lists of kvstore.Tensor or None), exactly as mlx-lm's cache classes
return them. Layer(class_name, state, meta_state) validates the pair the way
the class's from_state would and raises InvalidArgumentError otherwise.)doc")
      .def(py::init([](py::object class_name, py::object state, py::object meta_state) {
             return PyLayer(CacheFromPython(py::make_tuple(class_name, state, meta_state)));
           }),
           py::arg("class_name"), py::arg("state"), py::arg("meta_state") = py::str(""),
           "Build and check one layer (InvalidArgumentError naming the class and rule when invalid).")
      .def_property_readonly(
          "class_name", [](const PyLayer& l) { return std::string(l.cache()->class_name()); },
          "The mlx-lm cache class: \"KVCache\", \"RotatingKVCache\", \"QuantizedKVCache\", ...")
      .def_property_readonly("state", &PyLayer::state,
                             "The arrays: nested lists of kvstore.Tensor (or None), as mlx-lm's state.")
      .def_property_readonly("meta_state", &PyLayer::meta_state,
                             "Nested lists of str, as mlx-lm's meta_state.")
      .def_property_readonly("offset", [](const PyLayer& l) { return l.cache()->offset(); },
                             "Tokens seen, or None for classes without a scalar offset.")
      .def_property_readonly("nbytes", [](const PyLayer& l) { return Unwrap(l.cache()->Nbytes()); },
                             "Bytes of the layer's arrays, as mlx-lm's cache.nbytes.")
      .def("__repr__", [](const PyLayer& l) {
        return "kvstore.Layer(" + std::string(l.cache()->class_name()) + ", meta_state=" +
               l.cache()->meta_state().DebugString() + ")";
      });
}

}  // namespace kvstore::python
