#include "libkvstore/format/digests.h"

#include "kvstore/json.h"

namespace kvstore {

std::string CanonicalHeader(const std::vector<TensorInfo>& tensors, const Metadata& metadata) {
  Json root = Json::MakeObject();
  Json meta = Json::MakeObject();
  for (const auto& [k, v] : metadata) {
    if (k == kTensorDigestsMetaKey || k == kHeaderDigestMetaKey || k == kHmacMetaKey) continue;
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

std::string DigestsToJson(const std::map<std::string, Sha256Digest>& digests) {
  Json j = Json::MakeObject();
  for (const auto& [name, d] : digests) j.as_object().emplace_back(name, Json(d.ToHex()));
  return j.Dump();
}

Result<std::map<std::string, Sha256Digest>> DigestsFromJson(std::string_view json) {
  Result<Json> parsed = Json::Parse(json);
  if (!parsed.ok() || !parsed->is_object()) {
    return Status::Corruption("integrity: tensor digests are not a JSON object");
  }
  std::map<std::string, Sha256Digest> out;
  for (const auto& [name, v] : parsed->as_object()) {
    std::optional<Sha256Digest> d = v.is_string() ? Sha256Digest::FromHex(v.as_string()) : std::nullopt;
    if (!d) return Status::Corruption("integrity: digest of tensor \"" + name + "\" is not 64 hex digits");
    out[name] = *d;
  }
  return out;
}

}  // namespace kvstore
