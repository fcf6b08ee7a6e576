#include "libkvstore/format/digests.h"

#include "kvstore/json.h"
#include "libkvstore/format/layout.h"

namespace kvstore {

std::string CanonicalHeader(const std::vector<TensorInfo>& tensors, const Metadata& metadata) {
  Json root = Json::MakeObject();
  Json meta = Json::MakeObject();
  for (const auto& [k, v] : metadata) {
    if (IsDigestMetaKey(k) || IsHmacMetaKey(k)) continue;
    meta.as_object().emplace_back(k, Json(v));
  }
  Json tensor_map = Json::MakeObject();
  for (const TensorInfo& t : tensors) {
    Json entry = Json::MakeObject();
    entry["dtype"] = Json(std::string(DTypeName(t.dtype)));
    Json shape = Json::MakeArray();
    for (int64_t d : t.shape) shape.Push(Json(d));
    entry["shape"] = std::move(shape);
    tensor_map.as_object().emplace_back(t.name, std::move(entry));
  }
  root["metadata"] = std::move(meta);
  root["tensors"] = std::move(tensor_map);
  Json::DumpOptions sorted;
  sorted.sort_keys = true;
  return root.Dump(sorted);
}

namespace {

// "kvstore_..." of a key in either user namespace ("1." or 0.32's "0.").
std::string_view UserKey(std::string_view key) {
  return key.starts_with("0.") || key.starts_with("1.") ? key.substr(2) : std::string_view();
}

std::string_view Unprefixed(std::string_view key) { return key.substr(2); }

}  // namespace

DigestKeys DigestKeysFor(DigestAlgorithm algorithm, std::string_view user_prefix) {
  const std::string p(user_prefix);
  const bool sha = algorithm == DigestAlgorithm::kSha256;
  return {p + std::string(Unprefixed(sha ? kTensorDigestsMetaKey : kAlgTensorDigestsMetaKey)),
          p + std::string(Unprefixed(sha ? kHeaderDigestMetaKey : kAlgHeaderDigestMetaKey)),
          p + std::string(Unprefixed(kDigestAlgorithmMetaKey)), p + std::string(Unprefixed(kHmacMetaKey))};
}

bool IsDigestMetaKey(std::string_view key) {
  const std::string_view k = UserKey(key);
  return k == Unprefixed(kTensorDigestsMetaKey) || k == Unprefixed(kHeaderDigestMetaKey) ||
         k == Unprefixed(kAlgTensorDigestsMetaKey) || k == Unprefixed(kAlgHeaderDigestMetaKey);
}

bool IsHmacMetaKey(std::string_view key) { return UserKey(key) == Unprefixed(kHmacMetaKey); }

Result<DigestAlgorithm> DeclaredDigestAlgorithm(const Metadata& metadata, DigestKeys* keys) {
  const std::string_view prefix = UserPrefix(
      IsMlxLm032Metadata(metadata) ? PromptCacheLayout::kMlxLm032 : PromptCacheLayout::kMlxLm);
  DigestAlgorithm algorithm = DigestAlgorithm::kSha256;
  DigestKeys where = DigestKeysFor(algorithm, prefix);
  for (const auto& [k, v] : metadata) {
    if (k != where.algorithm) continue;
    std::optional<DigestAlgorithm> named = v == "xxh3" ? std::nullopt : DigestAlgorithmFromName(v);
    if (!named) {
      return Status::Corruption("integrity: unknown digest algorithm \"" + v +
                                "\" (this build verifies sha256 and xxh3-128)");
    }
    algorithm = *named;
    where = DigestKeysFor(algorithm, prefix);
  }
  if (keys != nullptr) *keys = where;
  return algorithm;
}

std::string DigestsToJson(const std::map<std::string, Digest>& digests) {
  Json j = Json::MakeObject();
  for (const auto& [name, d] : digests) j.as_object().emplace_back(name, Json(d.ToHex()));
  return j.Dump();
}

Result<std::map<std::string, Digest>> DigestsFromJson(std::string_view json, DigestAlgorithm algorithm) {
  Result<Json> parsed = Json::Parse(json);
  if (!parsed.ok() || !parsed->is_object()) {
    return Status::Corruption("integrity: tensor digests are not a JSON object");
  }
  std::map<std::string, Digest> out;
  for (const auto& [name, v] : parsed->as_object()) {
    std::optional<Digest> d = v.is_string() ? Digest::FromHex(algorithm, v.as_string()) : std::nullopt;
    if (!d) {
      return Status::Corruption("integrity: digest of tensor \"" + name + "\" is not " +
                                std::to_string(2 * DigestSize(algorithm)) + " hex digits (" +
                                std::string(DigestAlgorithmName(algorithm)) + ")");
    }
    out[name] = *d;
  }
  return out;
}

}  // namespace kvstore
