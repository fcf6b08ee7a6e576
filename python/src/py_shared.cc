// kvstore._kvstore.SharedTier: the shared tier (SharedPromptCache on a Redis
// KvBackend) for TieredPromptCache. Inserts run synchronously on the caller's
// thread, or with async_insert on the tier's own writer thread (bounded
// queue, drops counted: what TieredPromptCache uses); every value read is
// checked against the fingerprint and tokens asked for, and backend
// failures are misses. The GIL is released while the network is used.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvstore/redis_backend.h"
#include "kvstore/shared_prompt_cache.h"
#include "kvstore/shared_tier_admin.h"
#include "python/src/py_errors.h"
#include "python/src/py_layer.h"
#include "python/src/py_tiers.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

class PySharedTier {
 public:
  // `secret` None: no seal; "" is refused (InvalidArgumentError) before connecting.
  PySharedTier(const std::string& url, const std::string& key_prefix, std::optional<std::string> secret,
               int64_t chunk_tokens, std::optional<int> compression_level, bool async_insert) {
    SharedPromptCacheOptions options;
    options.key_prefix = key_prefix;
    options.chunk_tokens = chunk_tokens;
    options.secret = std::move(secret);
    options.compression_level = compression_level;
    options.async_insert = async_insert;
    ThrowIfError(SharedPromptCache::CheckOptions(options));
    redacted_url_ = RedactedRedisUrl(Unwrap(ParseRedisUrl(url)));
    RedisOptions redis;
    redis.url = url;
    auto opened = [&]() -> Result<std::shared_ptr<SharedPromptCache>> {
      py::gil_scoped_release release;
      KV_ASSIGN_OR_RETURN(std::unique_ptr<KvBackend> owned, OpenRedisBackend(redis));
      std::shared_ptr<KvBackend> backend(std::move(owned));
      options.backend = backend.get();
      KV_ASSIGN_OR_RETURN(std::unique_ptr<SharedPromptCache> shared, SharedPromptCache::Open(std::move(options)));
      // The backend lives as long as the tier: a call still running when
      // close() is called keeps both.
      return std::shared_ptr<SharedPromptCache>(shared.release(), [backend](SharedPromptCache* p) { delete p; });
    }();
    shared_ = Unwrap(std::move(opened));
  }

  ~PySharedTier() { Close(); }

  void Insert(const ModelFingerprint& model, const std::vector<int32_t>& tokens, const py::object& layers) {
    std::shared_ptr<SharedPromptCache> shared = Get();
    StoreLayers(layers, [&](const PromptCache& cache) { return shared->Insert(model, tokens, cache); });
  }

  // (length, [Layer...]) for the longest reusable prefix of `tokens` longer
  // than `min_tokens`, or None.
  py::object Fetch(const ModelFingerprint& model, const std::vector<int32_t>& tokens, int64_t min_tokens) {
    std::shared_ptr<SharedPromptCache> shared = Get();
    auto hit = [&] {
      py::gil_scoped_release release;
      return shared->Fetch(model, tokens, min_tokens);
    }();
    std::optional<SharedPromptCache::Hit> found = Unwrap(std::move(hit));
    if (!found) return py::none();
    return py::make_tuple(found->tokens, LayersToPython(found->cache));
  }

  // The fingerprint another server published for `model_id`, or None.
  std::optional<ModelFingerprint> PublishedModel(const std::string& model_id) {
    std::shared_ptr<SharedPromptCache> shared = Get();
    py::gil_scoped_release release;
    return shared->PublishedModel(model_id);
  }

  py::dict Stats() const {
    const SharedPromptCache::Stats s = Get()->stats();
    py::dict d;
    d["fetches"] = s.fetches;
    d["hits"] = s.hits;
    d["tokens_served"] = s.tokens_served;
    d["foreign_tokens_served"] = s.foreign_tokens_served;
    d["corrupt"] = s.corrupt;
    d["forged"] = s.forged;
    d["mismatched"] = s.mismatched;
    d["backend_errors"] = s.backend_errors;
    d["unsupported"] = s.unsupported;
    d["inserts"] = s.inserts;
    d["insert_errors"] = s.insert_errors;
    d["chunks_written"] = s.chunks_written;
    d["chunks_present"] = s.chunks_present;
    d["bytes_written"] = s.bytes_written;
    d["models_published"] = s.models_published;
    d["models_found"] = s.models_found;
    d["last_refusal"] = s.last_refusal;
    return d;
  }

  // Calls already running keep the tier open until they return.
  void Close() {
    std::shared_ptr<SharedPromptCache> shared = std::move(shared_);
    py::gil_scoped_release release;
    shared.reset();
  }

  std::shared_ptr<SharedPromptCache> Get() const {
    if (shared_ == nullptr) ThrowStatus(Status::FailedPrecondition("the shared tier is closed"));
    return shared_;
  }
  std::string Describe() const { return Get()->Describe() + " (" + redacted_url_ + ")"; }

 private:
  std::shared_ptr<SharedPromptCache> shared_;  // null once closed
  std::string redacted_url_;
};

}  // namespace

std::shared_ptr<SharedPromptCache> SharedTierOf(py::handle shared) { return shared.cast<const PySharedTier&>().Get(); }

void RegisterSharedTier(py::module_& m) {
  py::class_<PySharedTier>(m, "SharedTier", 
                              "Internal (used by kvstore.mlx_lm.TieredPromptCache): the shared tier, prompt-cache "
                              "chunks in Redis shared by every server.")
      .def(py::init<const std::string&, const std::string&, std::optional<std::string>, int64_t, std::optional<int>,
                    bool>(),
           py::arg("url"), py::arg("key_prefix") = "kvstore:", py::arg("secret") = py::none(),
           py::arg("chunk_tokens") = 256, py::arg("compression_level") = py::none(), py::arg("async_insert") = false)
      .def("insert", &PySharedTier::Insert, py::arg("model"), py::arg("tokens"), py::arg("layers"))
      .def("flush", [](PySharedTier& t) {
        std::shared_ptr<SharedPromptCache> shared = t.Get();
        py::gil_scoped_release release;
        shared->Flush();
      })
      .def("fetch", &PySharedTier::Fetch, py::arg("model"), py::arg("tokens"), py::arg("min_tokens") = 0)
      .def("published_model", &PySharedTier::PublishedModel, py::arg("model_id"))
      .def("stats", &PySharedTier::Stats)
      .def("close", &PySharedTier::Close)
      .def("__repr__", &PySharedTier::Describe);
  // Where the seal's secret comes from when none is given, as for kvtool and
  // prompt_cache_sim (apps/common/secret.h).
  m.attr("SHARED_SECRET_ENV") = "KVSTORE_SHARED_SECRET";
  // Where TieredPromptCache takes the shared tier's URL from when none is
  // given: a fleet turns the tier on without a code change or a password
  // on a command line.
  m.attr("REDIS_URL_ENV") = "KVSTORE_REDIS_URL";
}

}  // namespace kvstore::python
