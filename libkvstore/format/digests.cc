#include "libkvstore/format/digests.h"

#include "kvstore/json.h"

namespace kvstore {

std::string CanonicalHeader(const std::vector<TensorInfo>& tensors, const Metadata& metadata) {
  Json root = Json::MakeObject();
  Json meta = Json::MakeObject();
  for (const auto& [k, v] : metadata) {
    if (IsDigestMetaKey(k) || k == kHmacMetaKey) continue;
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

DigestKeys DigestKeysFor(DigestAlgorithm algorithm) {
  if (algorithm == DigestAlgorithm::kSha256) return {kTensorDigestsMetaKey, kHeaderDigestMetaKey};
  return {kAlgTensorDigestsMetaKey, kAlgHeaderDigestMetaKey};
}

bool IsDigestMetaKey(std::string_view key) {
  return key == kTensorDigestsMetaKey || key == kHeaderDigestMetaKey || key == kAlgTensorDigestsMetaKey ||
         key == kAlgHeaderDigestMetaKey;
}

Result<DigestAlgorithm> DeclaredDigestAlgorithm(const Metadata& metadata, DigestKeys* keys) {
  DigestAlgorithm algorithm = DigestAlgorithm::kSha256;
  DigestKeys where = DigestKeysFor(algorithm);
  for (const auto& [k, v] : metadata) {
    if (k != kDigestAlgorithmMetaKey) continue;
    std::optional<DigestAlgorithm> named = v == "xxh3" ? std::nullopt : DigestAlgorithmFromName(v);
    if (!named) {
      return Status::Corruption("integrity: unknown digest algorithm \"" + v +
                                "\" (this build verifies sha256 and xxh3-128)");
    }
    algorithm = *named;
    where = {kAlgTensorDigestsMetaKey, kAlgHeaderDigestMetaKey};
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
