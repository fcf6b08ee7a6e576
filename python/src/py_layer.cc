#include "python/src/py_layer.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "python/src/py_errors.h"
#include "python/src/py_strided.h"
#include "python/src/py_tree.h"

namespace py = pybind11;

namespace kvstore::python {

const py::object& PyLayer::state() {
  if (!state_) state_ = StateToPython(Unwrap(cache_->State()));
  return state_;
}

const py::object& PyLayer::full_state() {
  if (!full_state_) full_state_ = StateToPython(Unwrap(cache_->FullState()));
  return full_state_;
}

py::object PyLayer::meta_state() const { return MetaToPython(cache_->meta_state()); }

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
(nested lists of kvstore.Tensor or None), exactly as the cache classes of
mlx-lm up to 0.31 return them, and full_state, as mlx-lm 0.32's return it.
Layer(class_name, state, meta_state) validates the pair the way the class's
from_state would and raises InvalidArgumentError otherwise;
Layer.from_full_state(class_name, state) does the same for a 0.32 state.)doc")
      .def(py::init([](py::object class_name, py::object state, py::object meta_state) {
             return PyLayer(CacheFromPython(py::make_tuple(class_name, state, meta_state)));
           }),
           py::arg("class_name"), py::arg("state"), py::arg("meta_state") = py::str(""),
           "Build and check one layer (InvalidArgumentError naming the class and rule when invalid).")
      .def_property_readonly(
          "class_name", [](const PyLayer& l) { return std::string(l.cache()->class_name()); },
          "The mlx-lm cache class: \"KVCache\", \"RotatingKVCache\", \"QuantizedKVCache\", ...")
      .def_static(
          "from_full_state",
          [](const std::string& class_name, const py::object& state) {
            auto cache = CacheFromFullState(class_name, StateFromPython(state));
            if (!cache.ok() && cache.status().IsNotFound()) ThrowStatus(Status::NotSupported(cache.status().message()));
            return PyLayer(std::shared_ptr<Cache>(Unwrap(std::move(cache))));
          },
          py::arg("class_name"), py::arg("state"),
          "Build and check one layer from mlx-lm 0.32's state (its from_state(state)); errors as Layer().")
      .def_property_readonly("state", &PyLayer::state,
                             "The arrays: nested lists of kvstore.Tensor (or None), as the state of mlx-lm "
                             "up to 0.31 (buffers cut to their valid rows).")
      .def_property_readonly("full_state", &PyLayer::full_state,
                             "mlx-lm 0.32's state: the whole buffers (kvstore.Tensor or None) and the scalars "
                             "(int, bool, str) in the class's order.")
      .def_property_readonly("meta_state", &PyLayer::meta_state,
                             "Nested lists of str, as meta_state of mlx-lm up to 0.31.")
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
