#include "python/src/py_tree.h"

#include <string>

#include "python/src/py_errors.h"
#include "python/src/py_layer.h"
#include "python/src/py_strided.h"
#include "python/src/py_tensor.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

void CheckDepth(int depth) {
  if (depth > kMaxDepth) ThrowInvalid("state nested deeper than " + std::to_string(kMaxDepth) + " levels");
}

bool IsSequence(py::handle obj) { return py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj); }

}  // namespace

CacheState StateFromPython(py::handle obj, int depth) {
  CheckDepth(depth);
  if (obj.is_none()) return CacheState::None();
  if (IsSequence(obj)) {
    CacheState::List items;
    for (py::handle item : obj) items.push_back(StateFromPython(item, depth + 1));
    return CacheState(std::move(items));
  }
  // mlx-lm 0.32's scalars; a bool first, since a Python bool is an int.
  if (py::isinstance<py::bool_>(obj)) return CacheState::Bool(obj.cast<bool>());
  if (py::isinstance<py::int_>(obj)) return CacheState::Int(IntArg(obj, "a state scalar", INT64_MIN, INT64_MAX));
  if (py::isinstance<py::str>(obj)) return CacheState::String(obj.cast<std::string>());
  if (py::isinstance<py::float_>(obj)) ThrowInvalid("a float in a cache state (no mlx-lm cache class has one)");
  return CacheState(ArrayFromPython(obj));
}

py::object StateToPython(const CacheState& state) {
  if (state.is_none()) return py::none();
  if (state.is_array()) return TensorToPython(state.array());
  if (state.is_bool()) return py::bool_(state.bool_value());
  if (state.is_int()) return py::int_(state.int_value());
  if (state.is_string()) return py::str(state.str());
  py::list out;
  for (const CacheState& item : state.list()) out.append(StateToPython(item));
  return out;
}

MetaState MetaFromPython(py::handle obj, int depth) {
  CheckDepth(depth);
  if (py::isinstance<py::str>(obj)) return MetaState(obj.cast<std::string>());
  if (IsSequence(obj)) {
    MetaState::List items;
    for (py::handle item : obj) items.push_back(MetaFromPython(item, depth + 1));
    return MetaState(std::move(items));
  }
  ThrowInvalid("meta_state entries must be strings or lists, got " +
               std::string(py::str(obj.get_type().attr("__name__"))));
}

py::object MetaToPython(const MetaState& meta) {
  if (meta.is_string()) return py::str(meta.str());
  py::list out;
  for (const MetaState& item : meta.list()) out.append(MetaToPython(item));
  return out;
}

std::shared_ptr<Cache> CacheFromPython(py::handle layer) {
  if (py::isinstance<PyLayer>(layer)) return layer.cast<const PyLayer&>().cache();
  py::object class_name, state, meta;
  if (py::isinstance<py::tuple>(layer) && py::len(layer) == 3) {
    class_name = layer[py::int_(0)];
    state = layer[py::int_(1)];
    meta = layer[py::int_(2)];
  } else if (py::hasattr(layer, "class_name") && py::hasattr(layer, "state") && py::hasattr(layer, "meta_state")) {
    class_name = layer.attr("class_name");
    state = layer.attr("state");
    meta = layer.attr("meta_state");
  } else {
    ThrowInvalid("a layer must be a kvstore.Layer, have class_name/state/meta_state, or be a "
                 "(class_name, state, meta_state) tuple");
  }
  if (!py::isinstance<py::str>(class_name)) ThrowInvalid("a layer's class_name must be a string");
  const std::string name = class_name.cast<std::string>();
  auto cache = CacheFromState(name, StateFromPython(state), MetaFromPython(meta));
  if (!cache.ok()) {
    // An unknown class is something we cannot do, not a bad value.
    if (cache.status().IsNotFound()) ThrowStatus(Status::NotSupported(cache.status().message()));
    ThrowStatus(cache.status());
  }
  return std::shared_ptr<Cache>(std::move(cache).value());
}

}  // namespace kvstore::python
