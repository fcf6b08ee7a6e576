// kvstore.Layer: one cache layer as Python sees it (class_name, state,
// meta_state, and mlx-lm 0.32's full_state), backed by the library's cache
// object.
#ifndef KVSTORE_PYTHON_PY_LAYER_H_
#define KVSTORE_PYTHON_PY_LAYER_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <utility>
#include <vector>

#include "kvstore/cache.h"

namespace kvstore::python {

class PyLayer {
 public:
  explicit PyLayer(std::shared_ptr<Cache> cache) : cache_(std::move(cache)) {}

  const std::shared_ptr<Cache>& cache() const { return cache_; }
  // Each state is taken once, when first asked for (it shares the cache's
  // buffers, no byte copy); raises as Cache::State / FullState do (an empty
  // KVCache has a full state only). REQUIRES: the GIL held.
  const pybind11::object& state();
  const pybind11::object& full_state();
  pybind11::object meta_state() const;

 private:
  std::shared_ptr<Cache> cache_;
  pybind11::object state_;
  pybind11::object full_state_;
};

// Python layers for every cache of `cache`.
pybind11::list LayersToPython(const PromptCache& cache);
// The caches of a list of layers (see CacheFromPython).
PromptCache LayersFromPython(pybind11::handle layers);

void RegisterLayer(pybind11::module_& m);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_LAYER_H_
