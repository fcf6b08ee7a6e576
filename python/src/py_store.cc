// kvstore._kvstore.DiskStore: the disk tier (PromptCacheStore) for
// TieredPromptCache, keyed and checked by model fingerprint: a fetch never
// serves an entry written for another model configuration. Thread-safe like
// the store; the GIL is released while files are read, verified and written.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>
#include <string>
#include <vector>

#include "kvstore/prompt_cache_store.h"
#include "python/src/py_errors.h"
#include "python/src/py_layer.h"
#include "python/src/py_tiers.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

class PyDiskStore {
 public:
  PyDiskStore(const std::filesystem::path& directory, int64_t max_bytes) {
    PromptCacheStoreOptions options;
    options.max_bytes = max_bytes;
    // No report asked: Open returns at once and the directory is indexed in
    // the background, so a restarted server serves its first request at once
    // however full the store (fetches find their prefixes by name meanwhile).
    auto store = [&] {
      py::gil_scoped_release release;
      return PromptCacheStore::Open(Env::Default(), directory.string(), options);
    }();
    store_ = std::shared_ptr<PromptCacheStore>(Unwrap(std::move(store)));
  }

  // What indexing the directory found; waits for it to finish.
  StoreOpenReport OpenReport() const {
    std::shared_ptr<PromptCacheStore> store = Get();
    auto report = [&] {
      py::gil_scoped_release release;
      return store->WaitUntilIndexed();
    }();
    return Unwrap(std::move(report));
  }

  // InvalidArgumentError when the layers do not match `model`.
  void Put(const ModelFingerprint& model, const std::vector<int32_t>& tokens, const py::object& layers) {
    std::shared_ptr<PromptCacheStore> store = Get();
    StoreLayers(layers, [&](const PromptCache& cache) { return store->Put(model, tokens, cache); });
  }

  // (length, [Layer...]) for the longest stored prefix of `tokens`, or None.
  py::object Fetch(const ModelFingerprint& model, const std::vector<int32_t>& tokens) {
    std::shared_ptr<PromptCacheStore> store = Get();
    auto hit = [&] {
      py::gil_scoped_release release;
      return store->FetchLongestPrefix(model, tokens);
    }();
    std::optional<PromptCacheStore::Hit> found = Unwrap(std::move(hit));
    if (!found) return py::none();
    return py::make_tuple(found->length, LayersToPython(found->cache));
  }

  // Calls already running keep the store open until they return.
  void Close() {
    std::shared_ptr<PromptCacheStore> store = std::move(store_);
    py::gil_scoped_release release;
    store.reset();
  }

  std::shared_ptr<PromptCacheStore> Get() const {
    if (store_ == nullptr) ThrowStatus(Status::FailedPrecondition("the disk tier is closed"));
    return store_;
  }
  int64_t open_entries() const { return OpenReport().entries; }
  std::vector<std::string> dropped() const { return OpenReport().dropped; }

 private:
  std::shared_ptr<PromptCacheStore> store_;  // null once closed
};

}  // namespace

std::shared_ptr<PromptCacheStore> DiskStoreOf(py::handle disk) { return disk.cast<const PyDiskStore&>().Get(); }

void RegisterDiskStore(py::module_& m) {
  py::class_<PyDiskStore>(m, "DiskStore", 
                              "Internal (used by kvstore.mlx_lm.TieredPromptCache): the disk tier, a directory of "
                              "verified prompt-cache files.")
      .def(py::init<const std::filesystem::path&, int64_t>(), py::arg("directory"), py::arg("max_bytes"))
      .def("put", &PyDiskStore::Put, py::arg("model"), py::arg("tokens"), py::arg("layers"))
      .def("fetch", &PyDiskStore::Fetch, py::arg("model"), py::arg("tokens"))
      .def("close", &PyDiskStore::Close)
      .def_property_readonly("entries", [](const PyDiskStore& s) { return s.Get()->entries(); })
      .def_property_readonly("bytes", [](const PyDiskStore& s) { return s.Get()->bytes(); })
      .def_property_readonly("corrupt_dropped", [](const PyDiskStore& s) { return s.Get()->corrupt_dropped(); })
      .def_property_readonly("mismatched_dropped", [](const PyDiskStore& s) { return s.Get()->mismatched_dropped(); })
      .def_property_readonly("fingerprint_refused", [](const PyDiskStore& s) { return s.Get()->fingerprint_refused(); })
      .def_property_readonly("last_refusal", [](const PyDiskStore& s) { return s.Get()->last_refusal(); })
      .def("take_dropped", [](const PyDiskStore& s) { return s.Get()->TakeDropped(); },
           "The files removed as bad since the last call, each '<file>: <why>'.")
      .def_property_readonly("open_entries", &PyDiskStore::open_entries)
      .def_property_readonly("open_dropped", &PyDiskStore::dropped);
}

}  // namespace kvstore::python
