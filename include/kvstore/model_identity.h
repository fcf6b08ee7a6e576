// A model's identity for the persistent tiers: what the model is (the bytes
// of its weights, configuration and tokenizer files), not where it sits. Two
// copies of a model at different paths (each machine of a fleet downloads its
// own) get one identity and share their prompt caches; new weights at the
// same path get another.
//
//   kvstore::ModelContentDigests digests(env, "/var/cache/kv/kvstore-model-digests.json");
//   // mlx_lm.server's model key: (model_path, adapter_path, draft_model_path)
//   kvstore::Json key = kvstore::Json::Parse(R"(["/models/llama-3.1-8b", null, null])").value();
//   kvstore::Result<std::string> id = kvstore::ModelIdOfKey(key, digests);
//   // "kvstore-model/3:[\"sha256:9f2c...\",null,null]": the model id of a
//   // ModelFingerprint, which keys every tier.
//
// Hashing a model reads every byte of its files once (SHA-256, files in
// parallel on the library's pool); the digests are remembered by path, size
// and modification time, in memory and in the cache file, so a restart or a
// second server on the same machine does not read the weights again.
//
// Thread safety: ModelContentDigests may be used from many threads.
#ifndef KVSTORE_MODEL_IDENTITY_H_
#define KVSTORE_MODEL_IDENTITY_H_

#include <memory>
#include <string>

#include "kvstore/env.h"
#include "kvstore/json.h"
#include "kvstore/status.h"

namespace kvstore {

// "kvstore-model/3:": the prefix of every model id ModelIdOfKey makes.
inline constexpr char kModelIdPrefix[] = "kvstore-model/3:";

class ModelContentDigests {
 public:
  // `cache_file`: where digests are remembered across processes (written
  // atomically after each new digest); empty for memory only. A missing,
  // unreadable or malformed cache file is an empty cache: it is a hint,
  // trusted as far as the directory it sits in.
  // REQUIRES: env outlives this object.
  ModelContentDigests(Env* env, std::string cache_file);
  ~ModelContentDigests();
  ModelContentDigests(const ModelContentDigests&) = delete;
  ModelContentDigests& operator=(const ModelContentDigests&) = delete;

  // "sha256:<64 hex digits>" of the model at `path`: a file, or a
  // directory's model files (regular files directly in it whose names end
  // in .safetensors, .json, .npz, .gguf, .bin, .model, .tiktoken, .jinja or
  // .txt; hidden files excluded), by name, size and content. NotFound when
  // nothing the process can see is at `path` (any failed stat); IOError when
  // a file cannot be read or changes while it is read; InvalidArgument for
  // something that is neither a file nor a directory.
  Result<std::string> Of(const std::string& path);

  // How many files were read and hashed (not served from the cache) so far.
  int64_t files_hashed() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The persistent model id of a model key: kModelIdPrefix followed by the key
// as compact JSON, where every non-empty string that names an existing file
// or directory is replaced by its content digest (ModelContentDigests::Of).
// Other strings (a hub repository id, a revision) stay as they are.
// InvalidArgument for a key holding an object (keys are null, booleans,
// numbers, strings and arrays of them); Of()'s IOError.
Result<std::string> ModelIdOfKey(const Json& key, ModelContentDigests& digests);

}  // namespace kvstore

#endif  // KVSTORE_MODEL_IDENTITY_H_
