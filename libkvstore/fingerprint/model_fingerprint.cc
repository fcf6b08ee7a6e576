// ModelFingerprint: derivation from caches, validation of declared specs,
// and the first difference between two fingerprints.
#include "kvstore/model_fingerprint.h"

#include "kvstore/quantize.h"
#include "libkvstore/integrity/sha256.h"
#include "libkvstore/fingerprint/fingerprint_internal.h"

namespace kvstore {
namespace {

// Sets `out` to the first field that differs.
void Mismatch(std::string_view what, int64_t a, int64_t b, const std::string& where, std::string& out) {
  if (a != b && out.empty()) out = where + ": " + std::string(what) + " " + std::to_string(a) + " != " + std::to_string(b);
}

void Diff(const CacheSpec& a, const CacheSpec& b, const std::string& where_prefix, std::string& out) {
  const std::string where = where_prefix + " (" + a.class_name + ")";
  if (a.class_name != b.class_name) {
    out = where_prefix + ": class " + a.class_name + " != " + b.class_name;
    return;
  }
  const CacheClassInfo* info = FindCacheClass(a.class_name);
  if (a.dtype != b.dtype && info != nullptr && info->attention) {
    out = where + ": dtype " + std::string(DTypeName(a.dtype)) + " != " + std::string(DTypeName(b.dtype));
    return;
  }
  Mismatch("kv_heads", a.kv_heads, b.kv_heads, where, out);
  Mismatch("k_head_dim", a.k_head_dim, b.k_head_dim, where, out);
  Mismatch("v_head_dim", a.v_head_dim, b.v_head_dim, where, out);
  Mismatch("bits", a.bits, b.bits, where, out);
  Mismatch("group_size", a.group_size, b.group_size, where, out);
  Mismatch("max_size", a.max_size, b.max_size, where, out);
  Mismatch("keep", a.keep, b.keep, where, out);
  Mismatch("chunk_size", a.chunk_size, b.chunk_size, where, out);
  Mismatch("slot count", static_cast<int64_t>(a.slots.size()), static_cast<int64_t>(b.slots.size()), where, out);
  for (size_t i = 0; out.empty() && i < a.slots.size(); ++i) {
    const SlotSpec& x = a.slots[i];
    const SlotSpec& y = b.slots[i];
    if (x.dtype != y.dtype || x.shape != y.shape) {
      out = where + ": slot " + std::to_string(i) + " " + std::string(DTypeName(x.dtype)) + ShapeToString(x.shape) +
            " != " + std::string(DTypeName(y.dtype)) + ShapeToString(y.shape);
    }
  }
  Mismatch("child count", static_cast<int64_t>(a.children.size()), static_cast<int64_t>(b.children.size()),
                 where, out);
  for (size_t c = 0; out.empty() && c < a.children.size(); ++c) {
    Diff(a.children[c], b.children[c], where_prefix + "." + std::to_string(c), out);
  }
}

Status Need(bool ok, const std::string& where, const CacheSpec& spec, const std::string& rule) {
  if (ok) return Status::OK();
  return Status::InvalidArgument("model spec: " + where + " (" + spec.class_name + ") needs " + rule);
}

}  // namespace

std::string CacheSpecDifference(const CacheSpec& a, const CacheSpec& b, const std::string& where) {
  std::string out;
  Diff(a, b, where, out);
  return out;
}

Result<CacheSpec> SpecOfCache(const Cache& cache) {
  CacheSpec spec{.class_name = std::string(cache.class_name())};
  KV_RETURN_IF_ERROR(cache.DescribeSpec(spec));
  return spec;
}

Status ValidateCacheSpec(const CacheSpec& spec, const std::string& where, int depth) {
  const CacheClassInfo* info = FindCacheClass(spec.class_name);
  if (depth > kMaxSpecDepth) return Status::InvalidArgument("model spec: " + where + ": CacheList nesting deeper than 8");
  if (info == nullptr) {
    return Status::InvalidArgument("model spec: " + where + ": unknown class '" + spec.class_name + "'");
  }
  if (info->children) {
    for (size_t c = 0; c < spec.children.size(); ++c) {
      KV_RETURN_IF_ERROR(ValidateCacheSpec(spec.children[c], where + "." + std::to_string(c), depth + 1));
    }
    return Status::OK();
  }
  if (info->slots) {
    return Need(info->required_slots == 0 || spec.slots.size() == info->required_slots, where, spec,
                std::to_string(info->required_slots) + " slots");
  }
  KV_RETURN_IF_ERROR(Need(spec.kv_heads >= 1 && spec.k_head_dim >= 1 && spec.v_head_dim >= 1, where, spec,
                          "kv_heads, k_head_dim and v_head_dim >= 1"));
  if (info->quantized) {
    KV_RETURN_IF_ERROR(Need(IsSupportedQuantization(spec.bits, spec.group_size) &&
                                spec.k_head_dim % spec.group_size == 0 && spec.v_head_dim % spec.group_size == 0,
                            where, spec, "supported bits/group_size dividing the head dims"));
  }
  if (info->max_size) {
    KV_RETURN_IF_ERROR(Need(spec.max_size >= 1 && spec.keep >= 0 && spec.keep <= spec.max_size, where, spec,
                            "max_size >= 1 and 0 <= keep <= max_size"));
  }
  if (info->chunk_size) KV_RETURN_IF_ERROR(Need(spec.chunk_size >= 1, where, spec, "chunk_size >= 1"));
  return Status::OK();
}

Result<ModelFingerprint> ModelFingerprint::Make(ModelSpec spec) {
  if (spec.model_id.empty()) return Status::InvalidArgument("model spec: empty model id");
  if (spec.layers.empty()) return Status::InvalidArgument("model spec: no layers");
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    KV_RETURN_IF_ERROR(ValidateCacheSpec(spec.layers[i], "layer " + std::to_string(i), 0));
  }
  auto impl = std::make_shared<Impl>();
  Json::DumpOptions sorted;
  sorted.sort_keys = true;
  impl->json = ModelSpecToJson(spec).Dump(sorted);
  impl->digest = Sha256(std::string_view(impl->json));
  impl->spec = std::move(spec);
  return ModelFingerprint(std::move(impl));
}

Result<ModelFingerprint> ModelFingerprint::Of(std::string model_id, const PromptCache& cache) {
  ModelSpec spec;
  spec.model_id = std::move(model_id);
  for (size_t i = 0; i < cache.size(); ++i) {
    Result<CacheSpec> layer = SpecOfCache(*cache[i]);
    if (!layer.ok()) return layer.status().WithPrefix("layer " + std::to_string(i));
    spec.layers.push_back(std::move(layer).value());
  }
  return Make(std::move(spec));
}

const ModelSpec& ModelFingerprint::spec() const { return impl_->spec; }
const std::string& ModelFingerprint::json() const { return impl_->json; }
const Sha256Digest& ModelFingerprint::digest() const { return impl_->digest; }

std::string ModelFingerprint::DifferenceFrom(const ModelFingerprint& other) const {
  if (digest() == other.digest()) return "";
  const ModelSpec& a = spec();
  const ModelSpec& b = other.spec();
  if (a.model_id != b.model_id) return "model '" + a.model_id + "' != '" + b.model_id + "'";
  if (a.layers.size() != b.layers.size()) {
    return std::to_string(a.layers.size()) + " layers != " + std::to_string(b.layers.size());
  }
  std::string out;
  for (size_t i = 0; out.empty() && i < a.layers.size(); ++i) {
    out = CacheSpecDifference(a.layers[i], b.layers[i], "layer " + std::to_string(i));
  }
  return out.empty() ? "canonical forms differ" : out;
}

// Layer by layer against the spec, without the canonical JSON and its
// digest that Of() computes: the tiers check every insert.
Status ModelFingerprint::Check(const PromptCache& cache) const {
  const std::vector<CacheSpec>& want = spec().layers;
  std::string diff;
  if (cache.size() != want.size()) {
    diff = std::to_string(cache.size()) + " layers != " + std::to_string(want.size());
  }
  for (size_t i = 0; diff.empty() && i < cache.size(); ++i) {
    Result<CacheSpec> got = SpecOfCache(*cache[i]);
    if (!got.ok()) return got.status().WithPrefix("layer " + std::to_string(i));
    diff = CacheSpecDifference(*got, want[i], "layer " + std::to_string(i));
  }
  if (diff.empty()) return Status::OK();
  return Status::InvalidArgument("cache does not match the model: " + diff);
}

}  // namespace kvstore
