// kvstore._kvstore.ModelFingerprint: the model fingerprint the disk and
// shared tiers of TieredPromptCache key and check their entries by; and
// ModelContentDigests, the model id a model key gets from its files.
#include <pybind11/stl.h>

#include <limits>
#include <optional>
#include <string>

#include "kvstore/model_fingerprint.h"
#include "kvstore/model_identity.h"
#include "python/src/py_errors.h"
#include "python/src/py_layer.h"
#include "python/src/py_tiers.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

std::optional<Json> KeyAsJson(py::handle key, int depth) {
  if (depth > 16) return std::nullopt;
  if (key.is_none()) return Json();
  if (py::isinstance<py::bool_>(key)) return Json(key.cast<bool>());
  if (py::isinstance<py::int_>(key)) {
    try {
      return Json(key.cast<int64_t>());
    } catch (const py::cast_error&) {
      return std::nullopt;  // beyond int64
    }
  }
  if (py::isinstance<py::float_>(key)) return Json(key.cast<double>());
  if (py::isinstance<py::str>(key)) return Json(key.cast<std::string>());
  if (py::isinstance<py::tuple>(key) || py::isinstance<py::list>(key)) {
    Json out = Json::MakeArray();
    for (py::handle item : key) {
      std::optional<Json> v = KeyAsJson(item, depth + 1);
      if (!v) return std::nullopt;
      out.Push(std::move(*v));
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Json> ModelKeyAsJson(py::handle key) { return KeyAsJson(key, 0); }

void RegisterModelFingerprint(py::module_& m) {
  py::class_<ModelContentDigests>(m, "ModelContentDigests", R"doc(
Internal (used by kvstore.mlx_lm.TieredPromptCache). Model ids from what a
model is, not where it sits (kvstore/model_identity.h): every local path in a
model key is replaced by the SHA-256 of the model's weight, config and
tokenizer files, remembered by path, size and mtime in `cache_file` ('' for
memory only).)doc")
      .def(py::init([](const std::string& cache_file) {
             return std::make_unique<ModelContentDigests>(Env::Default(), cache_file);
           }),
           py::arg("cache_file"))
      .def(
          "model_id",
          [](ModelContentDigests& digests, const py::object& key) -> std::optional<std::string> {
            std::optional<Json> json = ModelKeyAsJson(key);
            if (!json) return std::nullopt;
            Result<std::string> id = [&] {
              py::gil_scoped_release release;  // may read the weights once
              return ModelIdOfKey(*json, digests);
            }();
            return Unwrap(std::move(id));
          },
          py::arg("key"),
          "The persistent model id of `key`, or None when the key has no JSON form (str, int, "
          "float, bool, None and tuples or lists of them). Raises when a model file cannot be read.")
      .def_property_readonly("files_hashed", &ModelContentDigests::files_hashed);

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
