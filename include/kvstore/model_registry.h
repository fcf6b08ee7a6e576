// ModelRegistry: the fingerprint (kvstore/model_fingerprint.h) a server's
// persistent tiers key a model's caches by, from what a server knows at a
// fetch: its model key (mlx_lm.server's (model_path, adapter_path,
// draft_model_path)). The key gives the model id, from the content of the
// model's files (kvstore/model_identity.h); the structure of the caches the
// model makes (classes, dtypes, KV heads, quantization, windows) is learned
// from its inserts.
//
// A restarted server knows no structure until its first insert, so every
// fetch before it would miss. The registry therefore keeps, per model id,
// the fingerprint it learned last:
//   - in memory;
//   - in the directory, when it has one (kvstore-models.json, beside the
//     disk tier's entries and kvstore-model-digests.json): rewritten
//     atomically when what it says changes; re-read when another server of
//     the directory changed it (a stat per lookup of an unknown model), and
//     merged before a write, so servers sharing a directory keep each
//     other's models;
//   - in the shared tier, whose record a server publishes with its first
//     insert: a server that knows nothing else takes the fleet's.
// The file and the published record are hints: a broken or hostile file is
// ignored (reported through Options::warn), and every entry a tier serves is
// still checked against the fingerprint it was asked for. What this process
// learned overrides both.
//
//   kvstore::ModelRegistry models({.directory = "/var/cache/kv"});
//   kvstore::Result<std::string> id = models.ModelId(model_key);  // reads the weights once
//   std::optional<kvstore::ModelFingerprint> fp = models.Find(*id);  // serve under *fp
//   models.Learn(*id, cache);  // at an insert: what the model makes now
//
// Thread safety: every member may be called from many threads.
#ifndef KVSTORE_MODEL_REGISTRY_H_
#define KVSTORE_MODEL_REGISTRY_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kvstore/cache.h"
#include "kvstore/env.h"
#include "kvstore/json.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/status.h"

namespace kvstore {

class SharedPromptCache;

// The registry's files in its directory.
inline constexpr char kModelsFileName[] = "kvstore-models.json";
inline constexpr char kModelDigestsFileName[] = "kvstore-model-digests.json";

class ModelRegistry {
 public:
  struct Options {
    Env* env = nullptr;  // nullptr: Env::Default()
    // Where the structures and the content digests are remembered; empty:
    // in memory only.
    std::string directory{};
    SharedPromptCache* shared = nullptr;  // optional; not owned, must outlive the registry
    // Told why a hint was ignored or could not be written (a server logs it).
    std::function<void(const std::string&)> warn{};
  };
  explicit ModelRegistry(const Options& options);
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // The model id of `key` (ModelIdOfKey), computed once per key for the
  // life of the registry, errors included (a model whose files cannot be
  // read is served by memory only until the server restarts).
  Result<std::string> ModelId(const Json& key);

  // What the persistent tiers serve `model_id` under: what this process
  // learned, else the directory's file, else the shared tier's record;
  // nullopt when none has one.
  std::optional<ModelFingerprint> Find(const std::string& model_id);

  // The fingerprint of `layers`, which the model `model_id` made: the one
  // known when the layers match it (nothing is computed), else a new one
  // (ModelFingerprint::Of's errors), which is remembered. An error writing
  // the file is warned, not returned: memory still knows.
  Result<ModelFingerprint> Learn(const std::string& model_id, const PromptCache& layers);

  // Records `fingerprint` as what its model makes now (the file is written
  // when that changes what it says); the write's error, if any.
  Status Remember(const ModelFingerprint& fingerprint);

  int64_t files_hashed() const;  // model files read to make ids so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstore

#endif  // KVSTORE_MODEL_REGISTRY_H_
