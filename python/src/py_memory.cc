// kvstore._kvstore.MemoryIndex: mlx-lm's LRUPromptCache policy (the C++
// port, kvstore/lru_prompt_cache.h) over Python cache objects.
//
// Each stored layer is a LayerHandle: a Cache that carries the Python entry
// (the list of cache objects given to insert), the layer's nbytes and
// is_trimmable() taken at insertion, and the entry's token count. The
// policy (trie search, which entry serves a fetch, prefix removal,
// eviction) runs in C++; the caller deep-copies the returned entry and trims
// it by the amount the fetch implies, as mlx-lm does. Not thread-safe (the
// Python caller holds a lock); every call runs with the GIL held, which also
// guards the Python references inside the handles.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "kvstore/lru_prompt_cache.h"
#include "python/src/py_errors.h"
#include "python/src/py_tiers.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

class LayerHandle final : public Cache {
 public:
  LayerHandle(std::shared_ptr<py::object> entry, int64_t entry_tokens, int64_t nbytes, bool trimmable)
      : entry_(std::move(entry)), entry_tokens_(entry_tokens), nbytes_(nbytes), trimmable_(trimmable) {}

  std::string_view class_name() const override { return "PythonCache"; }
  std::unique_ptr<Cache> Copy() const override { return std::make_unique<LayerHandle>(*this); }
  bool Empty() const override { return false; }
  Result<int64_t> Nbytes() const override { return nbytes_; }
  bool IsTrimmable() const override { return trimmable_; }
  // The real trim happens on the caller's deep copy.
  Result<int64_t> Trim(int64_t n) override { return n; }

  const py::object& entry() const { return *entry_; }
  int64_t entry_tokens() const { return entry_tokens_; }

 private:
  std::shared_ptr<py::object> entry_;
  int64_t entry_tokens_;
  int64_t nbytes_;
  bool trimmable_;
};

class PyMemoryIndex {
 public:
  PyMemoryIndex(int64_t max_size, int64_t max_bytes) : lru_(max_size, max_bytes) {}

  void Insert(const std::string& model, const std::vector<int32_t>& tokens, py::object entry,
              const std::vector<int64_t>& nbytes, const std::vector<bool>& trimmable,
              const std::string& cache_type) {
    if (nbytes.size() != trimmable.size()) ThrowStatus(Status::InvalidArgument("nbytes and trimmable differ in length"));
    auto type = ParseCacheType(cache_type);
    if (!type.ok()) throw py::key_error(cache_type);  // mlx-lm's KeyError
    auto shared = std::make_shared<py::object>(std::move(entry));
    PromptCache layers;
    for (size_t i = 0; i < nbytes.size(); ++i) {
      layers.push_back(std::make_shared<LayerHandle>(shared, static_cast<int64_t>(tokens.size()), nbytes[i],
                                                     static_cast<bool>(trimmable[i])));
    }
    ThrowIfError(lru_.InsertCache(model, tokens, std::move(layers), *type));
  }

  // (entry or None, entry token count, remaining token count). An entry of
  // no layers comes back as a new empty list.
  py::tuple Fetch(const std::string& model, const std::vector<int32_t>& tokens) const {
    LRUPromptCache::FetchResult found = Unwrap(lru_.FetchNearestCache(model, tokens));
    const auto remaining = static_cast<int64_t>(found.remaining.size());
    if (!found.cache) return py::make_tuple(py::none(), 0, remaining);
    if (found.cache->empty()) return py::make_tuple(py::list(), 0, remaining);
    const auto& handle = static_cast<const LayerHandle&>(*found.cache->front());
    return py::make_tuple(handle.entry(), handle.entry_tokens(), remaining);
  }

  py::dict StatsByType() const {
    py::dict out;
    const auto stats = lru_.StatsByType();
    for (CacheType type : kCacheTypes) {
      py::dict s;
      s["n_sequences"] = stats[static_cast<size_t>(type)].n_sequences;
      s["n_bytes"] = stats[static_cast<size_t>(type)].n_bytes;
      out[py::str(std::string(CacheTypeName(type)))] = s;
    }
    return out;
  }

  LRUPromptCache& lru() { return lru_; }
  const LRUPromptCache& lru() const { return lru_; }

 private:
  LRUPromptCache lru_;
};

}  // namespace

void RegisterMemoryIndex(py::module_& m) {
  py::class_<PyMemoryIndex>(m, "MemoryIndex", "mlx-lm's LRUPromptCache policy over Python cache objects.")
      .def(py::init<int64_t, int64_t>(), py::arg("max_size"), py::arg("max_bytes"))
      .def("insert", &PyMemoryIndex::Insert, py::arg("model"), py::arg("tokens"), py::arg("entry"),
           py::arg("nbytes"), py::arg("trimmable"), py::arg("cache_type"))
      .def("fetch", &PyMemoryIndex::Fetch, py::arg("model"), py::arg("tokens"))
      .def("trim_to", [](PyMemoryIndex& m, std::optional<int64_t> n_sequences, std::optional<int64_t> n_bytes) {
             m.lru().TrimTo(n_sequences, n_bytes);
           }, py::arg("n_sequences") = py::none(), py::arg("n_bytes") = py::none())
      .def("stats_by_type", &PyMemoryIndex::StatsByType)
      .def_property_readonly("nbytes", [](const PyMemoryIndex& m) { return m.lru().nbytes(); })
      .def_property_readonly("max_size", [](const PyMemoryIndex& m) { return m.lru().max_size(); })
      .def_property_readonly("max_bytes", [](const PyMemoryIndex& m) { return m.lru().max_bytes(); })
      .def("__len__", [](const PyMemoryIndex& m) { return m.lru().size(); });
}

}  // namespace kvstore::python
