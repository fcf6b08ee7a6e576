#include "kvstore/prompt_cache_info_json.h"

#include <string>
#include <utility>

namespace kvstore {

namespace {

Json TensorJson(const LayerTensor& t) {
  Json out = Json::MakeObject();
  out["name"] = Json(t.name);
  out["dtype"] = Json(std::string(DTypeName(t.dtype)));
  Json shape = Json::MakeArray();
  for (int64_t d : t.shape) shape.Push(Json(d));
  out["shape"] = std::move(shape);
  out["bytes"] = Json(t.nbytes);
  return out;
}

Json LayerJson(const LayerInfo& layer) {
  Json out = Json::MakeObject();
  out["index"] = Json(static_cast<int64_t>(layer.index));
  out["class"] = Json(layer.class_name);
  out["offset"] = layer.offset ? Json(*layer.offset) : Json();
  out["meta_state"] = MetaStateJson(layer.meta_state);
  Json tensors = Json::MakeArray();
  for (const LayerTensor& t : layer.tensors) tensors.Push(TensorJson(t));
  out["tensors"] = std::move(tensors);
  Json children = Json::MakeArray();
  for (const LayerInfo& c : layer.children) children.Push(LayerJson(c));
  out["children"] = std::move(children);
  Json errors = Json::MakeArray();
  for (const std::string& e : layer.errors) errors.Push(Json(e));
  out["errors"] = std::move(errors);
  if (!layer.unsupported.empty()) out["unsupported"] = Json(layer.unsupported);
  return out;
}

}  // namespace

Json MetaStateJson(const MetaState& meta) {
  if (meta.is_string()) return Json(meta.str());
  Json out = Json::MakeArray();
  for (const MetaState& c : meta.list()) out.Push(MetaStateJson(c));
  return out;
}

Json PromptCacheInfoJson(const PromptCacheInfo& info, std::string_view path,
                         std::optional<bool> verified) {
  Json out = Json::MakeObject();
  out["path"] = Json(path);
  out["format"] = Json(info.format());
  out["layout"] = Json(std::string(LayoutName(info.layout)));
  out["mlx_lm_versions"] = Json(info.mlx_lm_versions());
  Json warnings = Json::MakeArray();
  for (const std::string& w : info.mlx_lm_warnings) warnings.Push(Json(w));
  out["mlx_lm_warnings"] = std::move(warnings);
  out["valid"] = Json(info.valid());
  out["file_bytes"] = Json(info.file_bytes);
  out["tensor_bytes"] = Json(info.tensor_bytes);
  if (info.compression) {
    Json c = Json::MakeObject();
    c["codec"] = Json(info.compression->codec);
    c["level"] = Json();  // not recorded in the file
    c["frames"] = Json(info.compression->frames);
    c["compressed_bytes"] = Json(info.compression->compressed_bytes);
    out["compression"] = std::move(c);
  } else {
    out["compression"] = Json();
  }
  if (info.has_digests) {
    Json i = Json::MakeObject();
    i["algorithm"] = Json(std::string(DigestAlgorithmName(info.digest_algorithm)));
    i["verified"] = verified ? Json(*verified) : Json();
    out["integrity"] = std::move(i);
  } else {
    out["integrity"] = Json();
  }
  Json md = Json::MakeObject();
  for (const auto& [k, v] : info.user_metadata) md.as_object().emplace_back(k, Json(v));
  out["metadata"] = std::move(md);
  Json layers = Json::MakeArray();
  for (const LayerInfo& l : info.layers) layers.Push(LayerJson(l));
  out["layers"] = std::move(layers);
  if (!info.unsupported.empty()) out["unsupported"] = Json(info.unsupported);
  return out;
}

}  // namespace kvstore
