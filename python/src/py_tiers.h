// The building blocks of kvstore.mlx_lm.TieredPromptCache: the coordinator
// (ServerPromptCache, kvstore/server_prompt_cache.h, over Python cache
// objects), the disk tier (DiskStore, PromptCacheStore), the shared tier
// (SharedTier, SharedPromptCache on Redis) and the ModelFingerprint both key by.
#ifndef KVSTORE_PYTHON_PY_TIERS_H_
#define KVSTORE_PYTHON_PY_TIERS_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>

#include "kvstore/cache.h"
#include "kvstore/json.h"
#include "kvstore/prompt_cache_store.h"
#include "kvstore/shared_prompt_cache.h"
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

// The tier behind a DiskStore or SharedTier object; FailedPreconditionError
// when it is closed, TypeError for another object. REQUIRES: the GIL held.
std::shared_ptr<PromptCacheStore> DiskStoreOf(pybind11::handle disk);
std::shared_ptr<SharedPromptCache> SharedTierOf(pybind11::handle shared);

// A model key (mlx_lm.server's tuple of strings and None) as JSON; nullopt
// for a key JSON cannot name (it then has no persistent identity).
// REQUIRES: the GIL held.
std::optional<Json> ModelKeyAsJson(pybind11::handle key);

void RegisterServerPromptCache(pybind11::module_& m);
void RegisterDiskStore(pybind11::module_& m);
void RegisterModelFingerprint(pybind11::module_& m);
void RegisterSharedTier(pybind11::module_& m);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_TIERS_H_
