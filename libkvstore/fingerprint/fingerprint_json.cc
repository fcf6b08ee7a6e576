// The canonical JSON of a ModelFingerprint and its hostile-input parser.
#include <limits>
#include <optional>

#include "kvstore/quantize.h"
#include "libkvstore/fingerprint/fingerprint_internal.h"

namespace kvstore {
namespace {

// Caps on what a parsed fingerprint may hold, so a small hostile text
// cannot make a huge spec.
constexpr size_t kMaxLayers = 1 << 20;
constexpr size_t kMaxSlots = 4096;
constexpr size_t kMaxSlotRank = 16;

// The class's info; a name no class has gets one with no fields (Make
// then refuses it as an unknown class).
const CacheClassInfo& InfoOf(std::string_view cls) {
  static constexpr CacheClassInfo kUnknown{};
  const CacheClassInfo* info = FindCacheClass(cls);
  return info != nullptr ? *info : kUnknown;
}

Status Bad(const std::string& where, const std::string& what) {
  return Status::Corruption("model fingerprint: " + where + ": " + what);
}

// "'key' what" (built by appending: GCC 12 at -O3 misreads a one-character
// literal + temporary string as an overlapping copy).
std::string Field(std::string_view key, std::string_view what) {
  std::string out = "'";
  out.append(key).append("' ").append(what);
  return out;
}

Result<int64_t> IntField(const Json& j, std::string_view key, const std::string& where) {
  const Json* v = j.Find(key);
  std::optional<int64_t> i = v != nullptr ? AsInt64(*v) : std::nullopt;
  if (!i) return Bad(where, Field(key, "is not an integer"));
  return *i;
}

Result<std::string> StringField(const Json& j, std::string_view key, const std::string& where) {
  const Json* v = j.Find(key);
  if (v == nullptr || !v->is_string()) return Bad(where, Field(key, "is not a string"));
  return v->as_string();
}

Result<DType> DTypeField(const Json& j, const std::string& where) {
  KV_ASSIGN_OR_RETURN(std::string name, StringField(j, "dtype", where));
  std::optional<DType> d = ParseDType(name);
  if (!d) return Bad(where, "unknown dtype '" + name + "'");
  return *d;
}

Result<int> SmallIntField(const Json& j, std::string_view key, const std::string& where) {
  KV_ASSIGN_OR_RETURN(int64_t v, IntField(j, key, where));
  if (v < 0 || v > std::numeric_limits<int>::max()) return Bad(where, Field(key, "out of range"));
  return static_cast<int>(v);
}

Result<SlotSpec> SlotFromJson(const Json& j, const std::string& where) {
  if (!j.is_object()) return Bad(where, "a slot is not an object");
  SlotSpec slot;
  KV_ASSIGN_OR_RETURN(slot.dtype, DTypeField(j, where));
  const Json* shape = j.Find("shape");
  if (shape == nullptr || !shape->is_array() || shape->size() > kMaxSlotRank) return Bad(where, "bad slot shape");
  for (const Json& d : shape->as_array()) {
    std::optional<int64_t> dim = AsInt64(d);
    if (!dim || *dim < 0) return Bad(where, "bad slot shape");
    slot.shape.push_back(*dim);
  }
  return slot;
}

}  // namespace

Json CacheSpecToJson(const CacheSpec& spec) {
  Json j = Json::MakeObject();
  j["class"] = Json(spec.class_name);
  const CacheClassInfo& info = InfoOf(spec.class_name);
  if (info.attention) {
    j["dtype"] = Json(DTypeName(spec.dtype));
    j["heads"] = Json(spec.kv_heads);
    j["k_dim"] = Json(spec.k_head_dim);
    j["v_dim"] = Json(spec.v_head_dim);
  }
  if (info.quantized) {
    j["bits"] = Json(spec.bits);
    j["group_size"] = Json(spec.group_size);
  }
  if (info.max_size) j["max_size"] = Json(spec.max_size);
  if (info.keep) j["keep"] = Json(spec.keep);
  if (info.chunk_size) j["chunk_size"] = Json(spec.chunk_size);
  if (info.slots) {
    Json slots = Json::MakeArray();
    for (const SlotSpec& s : spec.slots) {
      Json slot = Json::MakeObject();
      slot["dtype"] = Json(DTypeName(s.dtype));
      Json shape = Json::MakeArray();
      for (int64_t d : s.shape) shape.Push(Json(d));
      slot["shape"] = std::move(shape);
      slots.Push(std::move(slot));
    }
    j["slots"] = std::move(slots);
  }
  if (info.children) {
    Json children = Json::MakeArray();
    for (const CacheSpec& c : spec.children) children.Push(CacheSpecToJson(c));
    j["children"] = std::move(children);
  }
  return j;
}

Json ModelSpecToJson(const ModelSpec& spec) {
  Json j = Json::MakeObject();
  j["format"] = Json(kFingerprintFormat);
  j["model"] = Json(spec.model_id);
  Json layers = Json::MakeArray();
  for (const CacheSpec& l : spec.layers) layers.Push(CacheSpecToJson(l));
  j["layers"] = std::move(layers);
  return j;
}

Result<CacheSpec> CacheSpecFromJson(const Json& j, const std::string& where, int depth) {
  if (!j.is_object()) return Bad(where, "not an object");
  if (depth > kMaxSpecDepth) return Bad(where, "CacheList nesting deeper than 8");
  CacheSpec spec;
  KV_ASSIGN_OR_RETURN(spec.class_name, StringField(j, "class", where));
  const CacheClassInfo& info = InfoOf(spec.class_name);
  if (info.attention) {
    KV_ASSIGN_OR_RETURN(spec.dtype, DTypeField(j, where));
    KV_ASSIGN_OR_RETURN(spec.kv_heads, IntField(j, "heads", where));
    KV_ASSIGN_OR_RETURN(spec.k_head_dim, IntField(j, "k_dim", where));
    KV_ASSIGN_OR_RETURN(spec.v_head_dim, IntField(j, "v_dim", where));
  }
  if (info.quantized) {
    KV_ASSIGN_OR_RETURN(spec.bits, SmallIntField(j, "bits", where));
    KV_ASSIGN_OR_RETURN(spec.group_size, SmallIntField(j, "group_size", where));
  }
  if (info.max_size) {
    KV_ASSIGN_OR_RETURN(spec.max_size, IntField(j, "max_size", where));
  }
  if (info.keep) {
    KV_ASSIGN_OR_RETURN(spec.keep, IntField(j, "keep", where));
  }
  if (info.chunk_size) {
    KV_ASSIGN_OR_RETURN(spec.chunk_size, IntField(j, "chunk_size", where));
  }
  if (info.slots) {
    const Json* slots = j.Find("slots");
    if (slots == nullptr || !slots->is_array() || slots->size() > kMaxSlots) return Bad(where, "bad slot list");
    for (const Json& s : slots->as_array()) {
      KV_ASSIGN_OR_RETURN(SlotSpec slot, SlotFromJson(s, where));
      spec.slots.push_back(std::move(slot));
    }
  }
  if (info.children) {
    const Json* children = j.Find("children");
    if (children == nullptr || !children->is_array()) return Bad(where, "bad child list");
    for (size_t c = 0; c < children->size(); ++c) {
      KV_ASSIGN_OR_RETURN(CacheSpec child,
                          CacheSpecFromJson(children->as_array()[c], where + "." + std::to_string(c), depth + 1));
      spec.children.push_back(std::move(child));
    }
  }
  return spec;
}

Result<ModelFingerprint> ModelFingerprint::FromJson(std::string_view json) {
  Result<Json> parsed = Json::Parse(json);
  if (!parsed.ok()) return Status::Corruption("model fingerprint: " + std::string(parsed.status().message()));
  const Json& root = *parsed;
  if (!root.is_object()) return Bad("root", "not an object");
  KV_ASSIGN_OR_RETURN(std::string format, StringField(root, "format", "root"));
  if (format != kFingerprintFormat) return Bad("root", "unknown format '" + format + "'");
  ModelSpec spec;
  KV_ASSIGN_OR_RETURN(spec.model_id, StringField(root, "model", "root"));
  const Json* layers = root.Find("layers");
  if (layers == nullptr || !layers->is_array() || layers->size() > kMaxLayers) return Bad("root", "bad layer list");
  for (size_t i = 0; i < layers->size(); ++i) {
    KV_ASSIGN_OR_RETURN(CacheSpec layer, CacheSpecFromJson(layers->as_array()[i], "layer " + std::to_string(i), 0));
    spec.layers.push_back(std::move(layer));
  }
  Result<ModelFingerprint> fp = Make(std::move(spec));
  if (!fp.ok()) return Status::Corruption(std::string(fp.status().message()));
  return fp;
}

}  // namespace kvstore
