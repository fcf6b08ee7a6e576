// kvstore.Layer: one cache layer as Python sees it (class_name, state,
// meta_state), backed by the library's cache object.
#ifndef KVSTORE_PYTHON_PY_LAYER_H_
#define KVSTORE_PYTHON_PY_LAYER_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore::python {

class PyLayer {
 public:
  // The state is taken once (it shares the cache's buffers, no byte copy).
  // REQUIRES: the GIL held.
  explicit PyLayer(std::shared_ptr<Cache> cache);

  const std::shared_ptr<Cache>& cache() const { return cache_; }
  const pybind11::object& state() const { return state_; }
  const pybind11::object& meta_state() const { return meta_state_; }

 private:
  std::shared_ptr<Cache> cache_;
  pybind11::object state_;
  pybind11::object meta_state_;
};

// Python layers for every cache of `cache`.
pybind11::list LayersToPython(const PromptCache& cache);
// The caches of a list of layers (see CacheFromPython).
PromptCache LayersFromPython(pybind11::handle layers);

void RegisterLayer(pybind11::module_& m);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_LAYER_H_
