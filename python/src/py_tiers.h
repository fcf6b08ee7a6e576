// The building blocks of kvstore.mlx_lm.TieredPromptCache: the memory tier's
// index (MemoryIndex, mlx-lm's LRUPromptCache policy over Python cache
// objects), the disk tier (DiskStore, PromptCacheStore), the shared tier
// (SharedTier, SharedPromptCache on Redis) and the ModelFingerprint both key by.
#ifndef KVSTORE_PYTHON_PY_TIERS_H_
#define KVSTORE_PYTHON_PY_TIERS_H_

#include <pybind11/pybind11.h>

#include "kvstore/cache.h"
#include "kvstore/status.h"
#include "python/src/py_errors.h"
#include "python/src/py_layer.h"

namespace kvstore::python {

// Calls `store(cache)` on the caches of Python `layers` with the GIL released,
// and raises its error. REQUIRES: the GIL held.
template <typename Store>
void StoreLayers(pybind11::handle layers, Store store) {
  const PromptCache cache = LayersFromPython(layers);
  Status s;
  {
    pybind11::gil_scoped_release release;
    s = store(cache);
  }
  ThrowIfError(s);
}

void RegisterMemoryIndex(pybind11::module_& m);
void RegisterDiskStore(pybind11::module_& m);
void RegisterModelFingerprint(pybind11::module_& m);
void RegisterSharedTier(pybind11::module_& m);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_TIERS_H_
