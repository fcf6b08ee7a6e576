#include "kvstore/model_registry.h"

#include <map>
#include <mutex>
#include <span>
#include <utility>

#include "kvstore/model_identity.h"
#include "kvstore/shared_prompt_cache.h"

namespace kvstore {

namespace {

constexpr int kModelsFileVersion = 1;
constexpr uint64_t kMaxModelsFileBytes = 16 << 20;

// {"version": 1, "models": {model id: fingerprint JSON text}}.
std::string ModelsFileText(const std::map<std::string, ModelFingerprint>& by_id) {
  Json models = Json::MakeObject();
  for (const auto& [id, fingerprint] : by_id) models[id] = Json(fingerprint.json());
  Json doc = Json::MakeObject();
  doc["version"] = Json(kModelsFileVersion);
  doc["models"] = std::move(models);
  return doc.Dump();
}

// The file's models; any flaw makes the whole file unusable (it is a hint).
Result<std::map<std::string, ModelFingerprint>> ParseModelsFile(std::string_view text) {
  KV_ASSIGN_OR_RETURN(Json doc, Json::Parse(text));
  const Json* version = doc.is_object() ? doc.Find("version") : nullptr;
  const Json* models = doc.is_object() ? doc.Find("models") : nullptr;
  if (version == nullptr || version->type() != Json::Type::kInt || version->as_int() != kModelsFileVersion || models == nullptr ||
      !models->is_object()) {
    return Status::Corruption("not a version " + std::to_string(kModelsFileVersion) + " models file");
  }
  std::map<std::string, ModelFingerprint> out;
  for (const auto& [id, value] : models->as_object()) {
    if (!value.is_string()) return Status::Corruption("the fingerprint of '" + id + "' is not a string");
    KV_ASSIGN_OR_RETURN(ModelFingerprint fingerprint, ModelFingerprint::FromJson(value.as_string()));
    if (fingerprint.model_id() != id) {
      return Status::Corruption("the fingerprint stored for '" + id + "' names '" + fingerprint.model_id() + "'");
    }
    out.emplace(id, std::move(fingerprint));
  }
  return out;
}

}  // namespace

struct ModelRegistry::Impl {
  Env* env;
  std::string models_file;  // empty: memory only
  SharedPromptCache* shared;
  std::function<void(const std::string&)> warn;
  ModelContentDigests digests;

  std::mutex mu;
  std::map<std::string, Result<std::string>> ids_by_key;   // guarded by mu
  std::map<std::string, ModelFingerprint> learned;        // guarded by mu: this process's
  std::map<std::string, ModelFingerprint> from_file;      // guarded by mu: what the file said
  std::map<std::string, ModelFingerprint> published;      // guarded by mu: the shared tier's records
  std::optional<Env::FileStat> file_seen;                 // guarded by mu: the file when last read
  bool file_read = false;                                 // guarded by mu
  std::mutex write_mu;  // one write of the file at a time

  Impl(const Options& o, Env* e)
      : env(e),
        models_file(o.directory.empty() ? "" : o.directory + "/" + kModelsFileName),
        shared(o.shared),
        warn(o.warn),
        digests(e, o.directory.empty() ? "" : o.directory + "/" + kModelDigestsFileName) {}

  void Warn(const std::string& message) const {
    if (warn) warn(message);
  }

  std::optional<Env::FileStat> StatFile() const {
    Result<Env::FileStat> st = env->Stat(models_file);
    if (!st.ok()) return std::nullopt;
    return *st;
  }
  static bool SameStat(const std::optional<Env::FileStat>& a, const std::optional<Env::FileStat>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->size == b->size && a->mtime_ns == b->mtime_ns);
  }

  // Adds the file's models to from_file when the file changed since it was
  // last read; why it was ignored, if it was, in `warning` (warned by the
  // caller once mu is released: a binding's warn may wait for its own lock).
  // REQUIRES: mu held.
  void ReadFileIfChanged(std::string& warning) {
    if (models_file.empty()) return;
    std::optional<Env::FileStat> now = StatFile();
    if (file_read && SameStat(now, file_seen)) return;
    file_read = true;
    file_seen = now;
    if (!now) return;  // no file yet
    Result<std::map<std::string, ModelFingerprint>> models = ReadFile(*now);
    if (!models.ok()) {
      warning = "ignoring " + models_file + ": " + models.status().ToString();
      return;
    }
    for (auto& [id, fingerprint] : *models) from_file.insert_or_assign(id, std::move(fingerprint));
  }

  Result<std::map<std::string, ModelFingerprint>> ReadFile(const Env::FileStat& st) const {
    if (!st.is_regular) return Status::Corruption("not a regular file");
    if (st.size > kMaxModelsFileBytes) {
      return Status::ResourceExhausted("larger than " + std::to_string(kMaxModelsFileBytes) + " bytes");
    }
    KV_ASSIGN_OR_RETURN(std::shared_ptr<const ReadableFile> file, env->OpenReadable(models_file));
    const std::span<const std::byte> bytes = file->data();
    if (bytes.size() > kMaxModelsFileBytes) return Status::ResourceExhausted("grew while it was read");
    return ParseModelsFile(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }

  // Writes what this process learned over what the file says of the
  // models it did not learn.
  Status WriteFile() {
    if (models_file.empty()) return Status::OK();
    std::lock_guard<std::mutex> writing(write_mu);
    std::string text, warning;
    {
      std::lock_guard<std::mutex> guard(mu);
      ReadFileIfChanged(warning);  // what other servers of the directory recorded
      std::map<std::string, ModelFingerprint> all = from_file;
      for (const auto& [id, fingerprint] : learned) all.insert_or_assign(id, fingerprint);
      text = ModelsFileText(all);
    }
    if (!warning.empty()) Warn(warning);
    Status s = WriteStringAtomic(env, models_file, std::as_bytes(std::span<const char>(text.data(), text.size())));
    std::lock_guard<std::mutex> guard(mu);
    if (s.ok()) file_seen = StatFile();  // our own write is not news
    return s;
  }
};

ModelRegistry::ModelRegistry(const Options& options)
    : impl_(std::make_unique<Impl>(options, options.env != nullptr ? options.env : Env::Default())) {}

ModelRegistry::~ModelRegistry() = default;

Result<std::string> ModelRegistry::ModelId(const Json& key) {
  const std::string text = key.Dump();
  {
    std::lock_guard<std::mutex> guard(impl_->mu);
    if (auto it = impl_->ids_by_key.find(text); it != impl_->ids_by_key.end()) return it->second;
  }
  Result<std::string> id = ModelIdOfKey(key, impl_->digests);  // may read the weights: unlocked
  if (!id.ok()) impl_->Warn("model " + text + " has no persistent id, memory tier only: " + id.status().ToString());
  std::lock_guard<std::mutex> guard(impl_->mu);
  return impl_->ids_by_key.emplace(text, std::move(id)).first->second;
}

std::optional<ModelFingerprint> ModelRegistry::Find(const std::string& model_id) {
  std::string warning;
  {
    std::lock_guard<std::mutex> guard(impl_->mu);
    if (auto it = impl_->learned.find(model_id); it != impl_->learned.end()) return it->second;
    auto known = [&]() -> std::optional<ModelFingerprint> {
      if (auto it = impl_->from_file.find(model_id); it != impl_->from_file.end()) return it->second;
      if (auto it = impl_->published.find(model_id); it != impl_->published.end()) return it->second;
      return std::nullopt;
    };
    if (std::optional<ModelFingerprint> hint = known()) return hint;
    // Unknown here: the file is looked at again only when it changed (a stat).
    impl_->ReadFileIfChanged(warning);
    if (std::optional<ModelFingerprint> hint = known()) return hint;
  }
  if (!warning.empty()) impl_->Warn(warning);
  if (impl_->shared == nullptr) return std::nullopt;
  std::optional<ModelFingerprint> published = impl_->shared->PublishedModel(model_id);  // a round trip: unlocked
  if (published && published->model_id() == model_id) {
    std::lock_guard<std::mutex> guard(impl_->mu);
    impl_->published.insert_or_assign(model_id, *published);
    return published;
  }
  return std::nullopt;
}

Result<ModelFingerprint> ModelRegistry::Learn(const std::string& model_id, const PromptCache& layers) {
  {
    std::lock_guard<std::mutex> guard(impl_->mu);
    if (auto it = impl_->learned.find(model_id); it != impl_->learned.end() && it->second.Check(layers).ok()) {
      return it->second;
    }
  }
  KV_ASSIGN_OR_RETURN(ModelFingerprint fingerprint, ModelFingerprint::Of(model_id, layers));
  if (Status s = Remember(fingerprint); !s.ok()) {
    impl_->Warn("cannot record the cache structure in " + impl_->models_file + ": " + s.ToString());
  }
  return fingerprint;
}

Status ModelRegistry::Remember(const ModelFingerprint& fingerprint) {
  {
    std::lock_guard<std::mutex> guard(impl_->mu);
    auto it = impl_->learned.find(fingerprint.model_id());
    if (it != impl_->learned.end() && it->second == fingerprint) return Status::OK();
    impl_->learned.insert_or_assign(fingerprint.model_id(), fingerprint);
    // The file already says it (e.g. a restarted server learning what it read).
    auto in_file = impl_->from_file.find(fingerprint.model_id());
    if (in_file != impl_->from_file.end() && in_file->second == fingerprint) return Status::OK();
  }
  return impl_->WriteFile();
}

int64_t ModelRegistry::files_hashed() const { return impl_->digests.files_hashed(); }

}  // namespace kvstore
