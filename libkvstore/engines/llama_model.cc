// Model descriptions for cache conversions: a Hugging Face config.json or
// the metadata of a GGUF file, reduced to LlamaModelInfo.
#include "kvstore/llama_model.h"

#include <cmath>
#include <cstring>
#include <string>

#include "kvstore/json.h"
#include "libkvstore/engines/gguf_metadata.h"

namespace kvstore {
namespace {

// ---- config.json ----

Result<std::optional<int64_t>> ConfigInt(const Json& config, std::string_view key) {
  const Json* v = config.Find(key);
  if (v == nullptr || v->is_null()) return std::optional<int64_t>();
  if (!v->is_integer() || v->type() == Json::Type::kUint || v->as_int() <= 0 || v->as_int() > INT32_MAX) {
    return Status::InvalidArgument("config.json: \"" + std::string(key) + "\" is not a positive 32-bit integer");
  }
  return std::optional<int64_t>(v->as_int());
}

Result<int64_t> RequiredInt(const Json& config, std::string_view key) {
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> v, ConfigInt(config, key));
  if (!v) return Status::InvalidArgument("config.json: \"" + std::string(key) + "\" is missing");
  return *v;
}

// The model's float type from "torch_dtype" (or "dtype", its newer name);
// nullopt when neither is given. Any other type (int8, float8_e4m3fn, a
// quantized model's) is refused rather than ignored: the conversion would
// otherwise pick a dtype the model does not use.
Result<std::optional<DType>> ConfigDType(const Json& config) {
  for (std::string_view key : {"torch_dtype", "dtype"}) {
    const Json* v = config.Find(key);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_string()) return Status::InvalidArgument("config.json: \"" + std::string(key) + "\" is not a string");
    if (v->as_string() == "float32") return std::optional<DType>(DType::kF32);
    if (v->as_string() == "float16") return std::optional<DType>(DType::kF16);
    if (v->as_string() == "bfloat16") return std::optional<DType>(DType::kBF16);
    std::string shown = v->as_string().substr(0, 40);
    for (char& c : shown) {
      if (c < ' ' || c > '~') c = '?';
    }
    return Status::NotSupported("config.json: \"" + std::string(key) + "\" \"" + shown +
                                "\" is not a float type (float32, float16 or bfloat16), which cannot be converted "
                                "between llama.cpp and mlx-lm");
  }
  return std::optional<DType>();
}

Status Refuse(std::string_view source, std::string_view what) {
  return Status::NotSupported(std::string(source) + ": " + std::string(what) +
                              ", which cannot be converted between llama.cpp and mlx-lm");
}

// Features a config declares that no table row can make convertible.
Status CheckConfigFeatures(const Json& config) {
  const Json* lora = config.Find("kv_lora_rank");
  if (lora != nullptr && !lora->is_null()) return Refuse("config.json", "kv_lora_rank declares latent attention (MLA caches)");
  if (const Json* types = config.Find("layer_types"); types != nullptr && types->is_array()) {
    for (const Json& t : types->as_array()) {
      if (!t.is_string() || t.as_string() == "full_attention") continue;
      if (t.as_string() == "sliding_attention") return Refuse("config.json", "layer_types declares sliding-window layers");
      return Refuse("config.json", "layer_types declares \"" + t.as_string() + "\" layers (hybrid or recurrent)");
    }
  }
  const Json* use_sw = config.Find("use_sliding_window");
  const Json* sw = config.Find("sliding_window");
  if (use_sw != nullptr && use_sw->is_bool() && use_sw->as_bool() && sw != nullptr && !sw->is_null()) {
    return Refuse("config.json", "use_sliding_window declares sliding-window attention");
  }
  for (std::string_view key : {"rope_scaling", "rope_parameters"}) {
    const Json* rope = config.Find(key);
    if (rope == nullptr || !rope->is_object()) continue;
    const Json* type = rope->Find("type");
    if (type == nullptr) type = rope->Find("rope_type");
    if (rope->Find("mrope_section") != nullptr || (type != nullptr && type->is_string() && type->as_string() == "mrope")) {
      return Refuse("config.json", std::string(key) + " declares M-RoPE (multi-axis positions)");
    }
  }
  return Status::OK();
}

// ---- GGUF ----

Status CheckGgufFeatures(const engines::GgufMetadata& md, const std::string& arch) {
  const std::string p = arch + ".";
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> sw, md.Int(p + "attention.sliding_window"));
  if (sw && *sw > 0) return Refuse("GGUF", p + "attention.sliding_window declares sliding-window attention");
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> lora, md.Int(p + "attention.kv_lora_rank"));
  if (lora && *lora > 0) return Refuse("GGUF", p + "attention.kv_lora_rank declares latent attention (MLA caches)");
  if (md.Find(p + "rope.dimension_sections") != nullptr) {
    return Refuse("GGUF", p + "rope.dimension_sections declares M-RoPE (multi-axis positions)");
  }
  for (const auto& [key, value] : md.entries) {
    if (key.starts_with(p + "ssm.") || key.starts_with(p + "wkv.") || key.starts_with(p + "rwkv.")) {
      return Refuse("GGUF", key + " declares recurrent layers (state that is not a plain KV cache)");
    }
  }
  return Status::OK();
}

Result<int64_t> GgufPositive(const engines::GgufMetadata& md, const std::string& key, std::optional<int64_t> fallback) {
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> v, md.Int(key));
  if (!v) v = fallback;
  if (!v) return Status::InvalidArgument("GGUF: " + key + " is missing");
  if (*v <= 0 || *v > INT32_MAX) return Status::InvalidArgument("GGUF: " + key + " = " + std::to_string(*v) + " is not a positive count");
  return *v;
}

std::optional<DType> GgufDType(const engines::GgufMetadata& md) {
  auto ft = md.Int("general.file_type");
  if (!ft.ok() || !ft->has_value()) return std::nullopt;
  switch (**ft) {
    case 0: return DType::kF32;   // LLAMA_FTYPE_ALL_F32
    case 1: return DType::kF16;   // LLAMA_FTYPE_MOSTLY_F16
    case 32: return DType::kBF16;  // LLAMA_FTYPE_MOSTLY_BF16
    default: return std::nullopt;  // quantized weights: the activations' type is not recorded
  }
}

Status CheckHeads(const LlamaModelInfo& m, std::string_view source) {
  if (m.n_head % m.n_head_kv != 0) {
    return Status::InvalidArgument(std::string(source) + ": n_head " + std::to_string(m.n_head) +
                                   " is not a multiple of n_head_kv " + std::to_string(m.n_head_kv));
  }
  if (m.rope_dims <= 0 || m.rope_dims > m.head_dim_k) {
    return Status::InvalidArgument(std::string(source) + ": RoPE dimension count " + std::to_string(m.rope_dims) +
                                   " is not in 1..head_dim " + std::to_string(m.head_dim_k));
  }
  return Status::OK();
}

}  // namespace

Result<LlamaModelInfo> ParseHfConfig(std::string_view json_text) {
  Result<Json> parsed = Json::Parse(json_text);
  if (!parsed.ok()) return Status::InvalidArgument("config.json: " + std::string(parsed.status().message()));
  const Json& config = *parsed;
  if (!config.is_object()) return Status::InvalidArgument("config.json: not a JSON object");
  const Json* type = config.Find("model_type");
  if (type == nullptr || !type->is_string()) return Status::InvalidArgument("config.json: \"model_type\" is missing");
  LlamaModelInfo m;
  m.source = "config.json";
  m.architecture = type->as_string();
  KV_RETURN_IF_ERROR(CheckConfigFeatures(config));
  KV_ASSIGN_OR_RETURN(m.rope, LookupRopeArchitecture(m.architecture));
  KV_ASSIGN_OR_RETURN(m.n_layer, RequiredInt(config, "num_hidden_layers"));
  KV_ASSIGN_OR_RETURN(m.n_head, RequiredInt(config, "num_attention_heads"));
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> kv, ConfigInt(config, "num_key_value_heads"));
  m.n_head_kv = kv.value_or(m.n_head);
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, ConfigInt(config, "head_dim"));
  if (!head_dim) {
    KV_ASSIGN_OR_RETURN(int64_t hidden, RequiredInt(config, "hidden_size"));
    if (hidden % m.n_head != 0) {
      return Status::InvalidArgument("config.json: hidden_size " + std::to_string(hidden) +
                                     " is not a multiple of num_attention_heads " + std::to_string(m.n_head));
    }
    head_dim = hidden / m.n_head;
  }
  m.head_dim_k = m.head_dim_v = *head_dim;
  m.rope_dims = m.head_dim_k;
  if (const Json* f = config.Find("partial_rotary_factor"); f != nullptr && f->is_number()) {
    const double dims = f->as_double() * static_cast<double>(m.head_dim_k);
    if (!(dims >= 1) || dims != std::floor(dims)) {
      return Status::InvalidArgument("config.json: partial_rotary_factor gives " + std::to_string(dims) + " rotary dims");
    }
    m.rope_dims = static_cast<int64_t>(dims);
  }
  KV_ASSIGN_OR_RETURN(m.dtype, ConfigDType(config));
  KV_RETURN_IF_ERROR(CheckHeads(m, "config.json"));
  return m;
}

Result<LlamaModelInfo> ParseGgufModel(std::span<const std::byte> bytes) {
  KV_ASSIGN_OR_RETURN(engines::GgufMetadata md, engines::ParseGgufMetadata(bytes));
  std::optional<std::string> arch = md.String("general.architecture");
  if (!arch) return Status::InvalidArgument("GGUF: general.architecture is missing");
  LlamaModelInfo m;
  m.source = "GGUF";
  m.architecture = *arch;
  KV_RETURN_IF_ERROR(CheckGgufFeatures(md, *arch));
  KV_ASSIGN_OR_RETURN(m.rope, LookupRopeArchitecture(*arch));
  const std::string p = *arch + ".";
  KV_ASSIGN_OR_RETURN(m.n_layer, GgufPositive(md, p + "block_count", std::nullopt));
  KV_ASSIGN_OR_RETURN(m.n_head, GgufPositive(md, p + "attention.head_count", std::nullopt));
  KV_ASSIGN_OR_RETURN(m.n_head_kv, GgufPositive(md, p + "attention.head_count_kv", m.n_head));
  KV_ASSIGN_OR_RETURN(std::optional<int64_t> embd, md.Int(p + "embedding_length"));
  std::optional<int64_t> default_dim;
  if (embd && *embd > 0 && *embd % m.n_head == 0) default_dim = *embd / m.n_head;
  KV_ASSIGN_OR_RETURN(m.head_dim_k, GgufPositive(md, p + "attention.key_length", default_dim));
  KV_ASSIGN_OR_RETURN(m.head_dim_v, GgufPositive(md, p + "attention.value_length", default_dim));
  KV_ASSIGN_OR_RETURN(m.rope_dims, GgufPositive(md, p + "rope.dimension_count", m.head_dim_k));
  m.dtype = GgufDType(md);
  KV_RETURN_IF_ERROR(CheckHeads(m, "GGUF"));
  return m;
}

Result<LlamaModelInfo> ReadLlamaModel(Env* env, const std::string& path) {
  std::string file = path;
  if (!env->FileExists(file)) return Status::NotFound("model '" + path + "' does not exist");
  if (env->GetChildren(file).ok()) file = path + "/config.json";  // a folder
  Result<std::shared_ptr<const ReadableFile>> opened = env->OpenReadable(file);
  if (!opened.ok()) return opened.status();
  std::span<const std::byte> bytes = (*opened)->data();
  Result<LlamaModelInfo> out = bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0
                                   ? ParseGgufModel(bytes)
                                   : ParseHfConfig(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  if (!out.ok()) return out.status().WithPrefix(file);
  return out;
}

}  // namespace kvstore
