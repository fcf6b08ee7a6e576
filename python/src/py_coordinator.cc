// kvstore._kvstore.ServerPromptCache: the C++ coordinator of the tiers
// (kvstore/server_prompt_cache.h) for TieredPromptCache, over Python cache
// objects.
//
// The memory tier's entries are PyEntry objects: the list of cache objects
// given to insert (mlx-lm keeps the same list) with its nbytes and
// trimmability, taken by the caller with the GIL. A memory hit hands the
// list back; the caller deep-copies and trims it on its own thread (MLX
// binds arrays to the thread's stream). The persistent tiers get kvstore
// layers converted once at insert (zero-copy views of the arrays, which
// the queued writes keep alive) and give kvstore layers back.
//
// The GIL is released for every call into the coordinator; a PyEntry
// takes it to drop its objects, which the coordinator does outside its
// lock, so no thread holds the coordinator's lock while it waits for the
// GIL.
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvstore/model_registry.h"
#include "kvstore/server_prompt_cache.h"
#include "python/src/py_errors.h"
#include "python/src/py_layer.h"
#include "python/src/py_tiers.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

bool InterpreterGone() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

class PyEntry final : public MemoryEntry {
 public:
  PyEntry(py::object caches, int64_t bytes, bool trimmable)
      : caches_(std::move(caches)), bytes_(bytes), trimmable_(trimmable) {}
  // Any thread may drop the last reference; the objects go under the GIL.
  ~PyEntry() override {
    if (InterpreterGone()) {
      caches_.release();  // nothing can run their destructors any more
      return;
    }
    py::gil_scoped_acquire gil;
    caches_ = py::object();
  }

  int64_t bytes() const override { return bytes_; }
  bool trimmable() const override { return trimmable_; }
  const py::object& caches() const { return caches_; }

 private:
  py::object caches_;
  int64_t bytes_;
  bool trimmable_;
};

void LogWarning(const std::string& message) {
  py::module_::import("logging").attr("getLogger")("kvstore").attr("warning")("kvstore: %s", message);
}

// The model registry's warnings, from whichever thread it runs on.
void LogWarningFromAnyThread(const std::string& message) {
  if (InterpreterGone()) return;
  py::gil_scoped_acquire gil;
  try {
    LogWarning(message);
  } catch (py::error_already_set&) {
    // Logging failed (e.g. at shutdown): the warning is lost, nothing else.
  }
}

class PyServerPromptCache {
 public:
  // `directory`: the disk tier's, where the model registry remembers the
  // models' structures and content digests (None: in memory).
  PyServerPromptCache(int64_t max_size, int64_t max_bytes, const std::string& policy, py::object disk,
                      py::object shared, size_t disk_queue, int64_t write_queue_bytes,
                      const std::optional<std::string>& directory) {
    ServerPromptCacheOptions options{.max_entries = max_size,
                                     .max_bytes = max_bytes,
                                     .memory_policy = Unwrap(ParseMemoryPolicy(policy)),
                                     .write_queue_capacity = disk_queue,
                                     .write_queue_bytes = write_queue_bytes};
    if (!disk.is_none()) store_ = DiskStoreOf(disk);
    if (!shared.is_none()) shared_ = SharedTierOf(shared);
    options.disk = store_.get();
    options.shared = shared_.get();
    options.directory = directory.value_or("");  // the model registry's (the store is given open)
    options.warn = LogWarningFromAnyThread;
    cache_ = std::make_unique<ServerPromptCache>(options);
    models_ = &cache_->models();
  }

  // The coordinator flushes the disk writes and drops the entries, which
  // take the GIL: both without holding it.
  ~PyServerPromptCache() {
    py::gil_scoped_release release;
    cache_.reset();
    store_.reset();
    shared_.reset();
  }

  // Stores `caches` in memory, and `layers` (the same caches as kvstore
  // layers, or None) in the persistent tiers under the fingerprint the
  // model registry learns from them for `model` (a model key). Returns why
  // the caches were not persisted, or None. KeyError for an unknown
  // cache_type, before any change.
  py::object Insert(const std::string& key, const py::object& model, const std::vector<int32_t>& tokens,
                    py::object caches, int64_t nbytes, bool trimmable, const std::string& cache_type,
                    const py::object& layers, const std::optional<std::string>& salt) {
    const Result<CacheType> type = ParseCacheType(cache_type);
    if (!type.ok()) throw py::key_error(cache_type);  // mlx-lm's KeyError
    PromptScope scope{key, std::nullopt, Tenant(salt)};
    auto entry = std::make_shared<PyEntry>(std::move(caches), nbytes, trimmable);
    PromptCache persistent;
    std::string why;
    if (!layers.is_none()) {
      if (std::optional<std::string> id = ModelIdOf(model)) {
        try {
          persistent = LayersFromPython(layers);
          py::gil_scoped_release release;
          if (Result<ModelFingerprint> learned = models_->Learn(*id, persistent); learned.ok()) {
            scope.model = *learned;
          } else {
            why = learned.status().ToString();
          }
        } catch (py::error_already_set& e) {
          why = e.what();
        }
      }
    }
    Status s;
    {
      py::gil_scoped_release release;
      s = cache_->Insert(scope, tokens, persistent,
                         {.cache_type = *type, .memory_entry = std::move(entry), .model_checked = true});
      persistent.clear();  // may hold the last references to Python buffers
    }
    if (!s.ok()) why = s.ToString();
    return why.empty() ? py::none() : py::cast(why);
  }

  // What `model` makes now, from `layers` (kvstore layers of a cache it
  // made): the fingerprint, or None when the key has no persistent id.
  std::optional<ModelFingerprint> RegisterModel(const py::object& model, const py::object& layers) {
    std::optional<std::string> id = ModelIdOf(model);
    if (!id) return std::nullopt;
    const PromptCache persistent = LayersFromPython(layers);
    py::gil_scoped_release release;
    return Unwrap(models_->Learn(*id, persistent));
  }

  // None on a miss, else (caches, entry_tokens, layers, reused, tier):
  // a memory entry's list (to copy, then trim by entry_tokens - reused) or
  // None, and a persistent tier's kvstore layers or None. A tier's error
  // is logged and is a miss.
  py::object Fetch(const std::string& key, const py::object& model, const std::vector<int32_t>& tokens,
                   const std::optional<std::string>& salt) {
    PromptScope scope{key, std::nullopt, Tenant(salt)};
    if (cache_->persistent_open()) {
      if (std::optional<std::string> id = ModelIdOf(model)) {
        py::gil_scoped_release release;
        scope.model = models_->Find(*id);
      }
    }
    Result<std::optional<ServerPromptCache::Hit>> hit = [&] {
      py::gil_scoped_release release;
      return cache_->Fetch(scope, tokens);
    }();
    if (!hit.ok()) {
      LogWarning("a tier's error made a miss: " + hit.status().ToString());
      return py::none();
    }
    if (!*hit) return py::none();
    const ServerPromptCache::Hit& h = **hit;
    py::object caches = py::none();
    py::object layers = py::none();
    if (h.entry != nullptr) {
      caches = static_cast<const PyEntry&>(*h.entry).caches();
    } else {
      layers = LayersToPython(h.cache);
    }
    return py::make_tuple(caches, h.entry_tokens, layers, h.reused, std::string(PromptCacheTierName(h.tier)));
  }

  void TrimTo(std::optional<int64_t> n_sequences, std::optional<int64_t> n_bytes) {
    py::gil_scoped_release release;
    cache_->TrimTo(n_sequences, n_bytes);
  }

  py::dict StatsByType() const {
    std::array<CacheTypeStats, kNumCacheTypes> stats;
    {
      py::gil_scoped_release release;
      stats = cache_->StatsByType();
    }
    py::dict out;
    for (CacheType type : kCacheTypes) {
      py::dict s;
      s["n_sequences"] = stats[static_cast<size_t>(type)].n_sequences;
      s["n_bytes"] = stats[static_cast<size_t>(type)].n_bytes;
      out[py::str(std::string(CacheTypeName(type)))] = s;
    }
    return out;
  }

  ServerPromptCache::MemoryUsage Usage() const {
    py::gil_scoped_release release;
    return cache_->memory_usage();
  }

  PromptCacheMetrics Metrics() const {
    py::gil_scoped_release release;
    return cache_->metrics();
  }

  void Flush() {
    py::gil_scoped_release release;
    cache_->Flush();
  }

  // Flushes and lets go of the persistent tiers; memory stays usable.
  void Close() {
    py::gil_scoped_release release;
    cache_->ClosePersistentTiers();
    std::lock_guard<std::mutex> l(close_mu_);
    store_.reset();
    shared_.reset();
  }

 private:
  // The tenant of a salt (None: none); InvalidArgumentError for "".
  static std::optional<TenantSalt> Tenant(const std::optional<std::string>& salt) {
    if (!salt) return std::nullopt;
    return Unwrap(TenantSalt::Make(*salt));
  }

  // The persistent model id of a model key, or nullopt (no JSON form, or
  // files that cannot be read: the registry warns once). REQUIRES: the GIL held.
  std::optional<std::string> ModelIdOf(const py::object& model) {
    std::optional<Json> json = ModelKeyAsJson(model);
    if (!json) return std::nullopt;
    py::gil_scoped_release release;  // the first time, reads the model's files
    Result<std::string> id = models_->ModelId(*json);
    if (!id.ok()) return std::nullopt;
    return *id;
  }

  std::unique_ptr<ServerPromptCache> cache_;
  ModelRegistry* models_ = nullptr;        // cache_'s: what each model key is served under
  std::mutex close_mu_;
  std::shared_ptr<PromptCacheStore> store_;    // kept open while the coordinator uses it
  std::shared_ptr<SharedPromptCache> shared_;
};

}  // namespace

void RegisterServerPromptCache(py::module_& m) {
  py::class_<PyServerPromptCache>(m, "ServerPromptCache",
                                  
                                  "Internal (used by kvstore.mlx_lm.TieredPromptCache): the tier coordinator "
                                  "(kvstore/server_prompt_cache.h).")
      .def(py::init<int64_t, int64_t, const std::string&, py::object, py::object, size_t, int64_t,
                    const std::optional<std::string>&>(),
           py::arg("max_size"), py::arg("max_bytes"), py::kw_only(), py::arg("policy") = "mlx-lm",
           py::arg("disk") = py::none(), py::arg("shared") = py::none(), py::arg("disk_queue") = 64,
           py::arg("write_queue_bytes") = int64_t{1} << 30, py::arg("directory") = py::none())
      .def("insert", &PyServerPromptCache::Insert, py::arg("key"), py::arg("model"), py::arg("tokens"),
           py::arg("caches"), py::arg("nbytes"), py::arg("trimmable"), py::arg("cache_type"), py::arg("layers"),
           py::arg("salt") = py::none())
      .def("register_model", &PyServerPromptCache::RegisterModel, py::arg("model"), py::arg("layers"))
      .def("fetch", &PyServerPromptCache::Fetch, py::arg("key"), py::arg("model"), py::arg("tokens"),
           py::arg("salt") = py::none())
      .def("trim_to", &PyServerPromptCache::TrimTo, py::arg("n_sequences") = py::none(),
           py::arg("n_bytes") = py::none())
      .def("stats_by_type", &PyServerPromptCache::StatsByType)
      .def("metrics_text", [](const PyServerPromptCache& c) { return PrometheusText(c.Metrics()); })
      .def("unknown_model_fetches", [](const PyServerPromptCache& c) { return c.Metrics().unknown_model_fetches; })
      .def_property_readonly("nbytes", [](const PyServerPromptCache& c) { return c.Usage().bytes; })
      .def("__len__", [](const PyServerPromptCache& c) { return c.Usage().entries; })
      .def("flush", &PyServerPromptCache::Flush)
      .def("close", &PyServerPromptCache::Close);
}

}  // namespace kvstore::python
