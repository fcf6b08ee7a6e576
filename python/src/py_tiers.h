// The building blocks of kvstore.mlx_lm.TieredPromptCache: the memory tier's
// index (MemoryIndex, mlx-lm's LRUPromptCache policy over Python cache
// objects) and the disk tier (DiskStore, PromptCacheStore).
#ifndef KVSTORE_PYTHON_PY_TIERS_H_
#define KVSTORE_PYTHON_PY_TIERS_H_

#include <pybind11/pybind11.h>

namespace kvstore::python {

void RegisterMemoryIndex(pybind11::module_& m);
void RegisterDiskStore(pybind11::module_& m);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_TIERS_H_
