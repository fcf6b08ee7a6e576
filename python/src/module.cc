// kvstore._kvstore: the native half of the Python package `kvstore`
// (python/kvstore/ holds the other half and the documentation).
#include <pybind11/pybind11.h>

#include "python/src/py_file.h"
#include "python/src/py_layer.h"
#include "python/src/py_tensor.h"
#include "python/src/py_tiers.h"

PYBIND11_MODULE(_kvstore, m) {
  m.doc() = "Native part of kvstore: prompt-cache files, tensors and the tiers of TieredPromptCache.";
  kvstore::python::RegisterTensor(m);
  kvstore::python::RegisterLayer(m);
  kvstore::python::RegisterFileApi(m);
  kvstore::python::RegisterConvertApi(m);
  kvstore::python::RegisterMlxRead(m);
  kvstore::python::RegisterModelFingerprint(m);
  kvstore::python::RegisterDiskStore(m);
  kvstore::python::RegisterSharedTier(m);
  kvstore::python::RegisterServerPromptCache(m);
}
