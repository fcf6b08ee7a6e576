#include "libkvstore/engines/llama_metadata.h"

#include "kvstore/json.h"

namespace kvstore::engines {
namespace {

Status Bad(std::string_view field) {
  return Status::InvalidArgument("metadata \"llama_cpp\": \"" + std::string(field) + "\" is missing or malformed");
}

Result<uint32_t> Count(const Json& j, std::string_view field) {
  const Json* v = j.Find(field);
  if (v == nullptr || !v->is_integer() || v->type() == Json::Type::kUint || v->as_int() < 0 ||
      v->as_int() > kLlamaStateMaxStreams) {
    return Bad(field);
  }
  return static_cast<uint32_t>(v->as_int());
}

Result<GgmlType> Type(const Json& j, std::string_view field) {
  const Json* v = j.Find(field);
  if (v == nullptr || !v->is_string()) return Bad(field);
  std::optional<GgmlType> t = ParseGgmlType(v->as_string());
  if (!t) return Bad(field);
  return *t;
}

}  // namespace

std::string TokenListJson(const std::vector<int32_t>& tokens) {
  std::string out = "[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(tokens[i]);
  }
  return out + "]";
}

std::string LlamaTargetJson(const LlamaTarget& t) {
  Json j = Json::MakeObject();
  j["k_type"] = Json(GgmlTypeName(static_cast<int32_t>(t.k_type)));
  j["v_type"] = Json(GgmlTypeName(static_cast<int32_t>(t.v_type)));
  j["flash_attn"] = Json(t.flash_attn);
  j["n_stream"] = Json(int64_t{t.n_stream});
  j["stream"] = Json(int64_t{t.stream});
  j["seq_id"] = Json(int64_t{t.seq_id});
  return j.Dump();
}

Result<std::optional<int32_t>> ApplyLlamaTargetJson(std::string_view json_text, PromptCacheToLlamaOptions& options) {
  Result<Json> parsed = Json::Parse(json_text);
  if (!parsed.ok() || !parsed->is_object()) return Status::InvalidArgument("metadata \"llama_cpp\" is not a JSON object");
  const Json& j = *parsed;
  KV_ASSIGN_OR_RETURN(GgmlType k_type, Type(j, "k_type"));
  KV_ASSIGN_OR_RETURN(GgmlType v_type, Type(j, "v_type"));
  const Json* fa = j.Find("flash_attn");
  if (fa == nullptr || !fa->is_bool()) return Bad("flash_attn");
  KV_ASSIGN_OR_RETURN(uint32_t n_stream, Count(j, "n_stream"));
  KV_ASSIGN_OR_RETURN(uint32_t stream, Count(j, "stream"));
  const Json* seq = j.Find("seq_id");
  if (seq == nullptr || !seq->is_integer() || seq->type() == Json::Type::kUint || seq->as_int() < 0 ||
      seq->as_int() > INT32_MAX) {
    return Bad("seq_id");
  }
  if (!options.k_type) options.k_type = k_type;
  if (!options.v_type) options.v_type = v_type;
  if (!options.flash_attn) options.flash_attn = fa->as_bool();
  // The recorded stream and sequence id only mean something with the
  // recorded stream count.
  if (options.n_stream) return std::optional<int32_t>();
  options.n_stream = n_stream;
  if (!options.stream) options.stream = stream;
  return std::optional<int32_t>(static_cast<int32_t>(seq->as_int()));
}

}  // namespace kvstore::engines
