// CacheState / MetaState <-> Python nested lists.
//   state: None | array-like | int | bool | str | list/tuple of states (arrays
//          become kvstore.Tensor going out; the scalars are mlx-lm 0.32's)
//   meta_state: str | list/tuple of meta states
// Nesting deeper than kMaxDepth is refused (InvalidArgumentError).
#ifndef KVSTORE_PYTHON_PY_TREE_H_
#define KVSTORE_PYTHON_PY_TREE_H_

#include <pybind11/pybind11.h>

#include <memory>

#include "kvstore/cache.h"
#include "kvstore/cache_state.h"

namespace kvstore::python {

inline constexpr int kMaxDepth = 16;

CacheState StateFromPython(pybind11::handle obj, int depth = 0);
pybind11::object StateToPython(const CacheState& state);
MetaState MetaFromPython(pybind11::handle obj, int depth = 0);
pybind11::object MetaToPython(const MetaState& meta);

// One layer for a save: a kvstore.Layer (its cache is used as is), any object
// with class_name, state and meta_state attributes, or a (class_name, state,
// meta_state) tuple, built with CacheFromState. REQUIRES: the GIL held.
std::shared_ptr<Cache> CacheFromPython(pybind11::handle layer);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_TREE_H_
