// write_interop_files FIXTURES_DIR OUT_DIR: writes prompt-cache files with
// libkvstore, in every layout option mlx-lm can read (the current layout with
// and without digests, aligned and not, and the v0.31 release's), and OUT_DIR/manifest.json
// saying what each holds (class, meta_state and every state leaf's dtype,
// shape and SHA-256), for check_interop.py to load with the real mlx-lm.
//
// The caches: every fixture written by mlx-lm (all its classes), loaded and
// then changed by the library (trimmable layers trimmed by 2 tokens), plus
// caches the library builds itself (BF16 KVCache, wrapped RotatingKVCache,
// QuantizedKVCache from ToQuantized, MambaCache, a CacheList).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kvstore/arrays_cache.h"
#include "kvstore/cache_list.h"
#include "kvstore/env.h"
#include "kvstore/json.h"
#include "kvstore/kv_cache.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/prompt_cache_info_json.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/integrity/sha256.h"

namespace fs = std::filesystem;
using namespace kvstore;

namespace {

struct Variant {
  const char* name;
  SavePromptCacheOptions options;
  // The release's ArraysCache layout: mlx-lm v0.31 state (the flat slot list).
  bool flat_arrays() const { return options.layout == PromptCacheLayout::kMlxLm031; }
};

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  SavePromptCacheOptions current;
  current.layout = PromptCacheLayout::kMlxLm;  // integrity on, 8-byte aligned data
  v.push_back({"mlx-lm", current});
  SavePromptCacheOptions plain = current;
  plain.integrity = false;
  v.push_back({"mlx-lm.no-integrity", plain});
  SavePromptCacheOptions xxh3 = current;  // the disk tier's digests: mlx-lm ignores them too
  xxh3.digest = DigestAlgorithm::kXxh3_128;
  v.push_back({"mlx-lm.xxh3", xxh3});
  SavePromptCacheOptions unaligned = current;
  unaligned.alignment = 1;  // MLX's own layout
  v.push_back({"mlx-lm.align1", unaligned});
  SavePromptCacheOptions release;
  release.layout = PromptCacheLayout::kMlxLm031;
  v.push_back({"mlx-lm-0.31", release});
  return v;
}

// The state as the variant's mlx-lm holds it: ArraysCache (also inside a
// CacheList) as its flat slot list for the release's layout.
CacheState StateFor(std::string_view class_name, const CacheState& state, const MetaState& meta, bool flat) {
  if (!flat) return state;
  if (class_name == "ArraysCache" || class_name == "MambaCache") return state[0];
  if (class_name == "CacheList") {
    CacheState::List children;
    for (size_t i = 0; i < state.size(); ++i) {
      children.push_back(StateFor(meta[0][i].str(), state[i], meta[1][i], flat));
    }
    return CacheState(std::move(children));
  }
  return state;
}

// [name, dtype, shape, sha256] per leaf, null for None, in tree_flatten order.
void Leaves(const CacheState& s, const std::string& name, Json& out) {
  if (s.is_list()) {
    for (size_t i = 0; i < s.size(); ++i) Leaves(s[i], name.empty() ? std::to_string(i) : name + "." + std::to_string(i), out);
    return;
  }
  Json leaf = Json::MakeArray();
  leaf.Push(Json(name));
  if (s.is_none()) {
    leaf.Push(Json());
    out.Push(std::move(leaf));
    return;
  }
  const Array& a = s.array();
  Sha256Hasher h;
  a.ForEachRun([&](std::span<const std::byte> run) { h.Update(run); });
  Json shape = Json::MakeArray();
  for (int64_t d : a.shape()) shape.Push(Json(d));
  leaf.Push(Json(std::string(DTypeName(a.dtype()))));
  leaf.Push(std::move(shape));
  leaf.Push(Json(h.Finish().ToHex()));
  out.Push(std::move(leaf));
}

Result<Json> Describe(const PromptCache& cache, bool flat_arrays) {
  Json layers = Json::MakeArray();
  for (const auto& layer : cache) {
    Json l = Json::MakeObject();
    // mlx-lm files name MambaCache ArraysCache (docs/compat.md).
    l["class"] = Json(layer->class_name() == "MambaCache" ? std::string("ArraysCache") : std::string(layer->class_name()));
    l["meta_state"] = MetaStateJson(layer->meta_state());
    KV_ASSIGN_OR_RETURN(CacheState state, layer->State());
    Json leaves = Json::MakeArray();
    Leaves(StateFor(layer->class_name(), state, layer->meta_state(), flat_arrays), "", leaves);
    l["state"] = std::move(leaves);
    layers.Push(std::move(l));
  }
  return layers;
}

Array Ramp(DType dtype, const Shape& shape, float scale) {
  std::vector<float> v(static_cast<size_t>(ShapeNumel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 251) - 125) / 64.0f;
  return Array::FromValues<float>(DType::kF32, shape, v).AsType(dtype).value();
}

Result<std::vector<std::pair<std::string, PromptCache>>> BuiltCaches() {
  std::vector<std::pair<std::string, PromptCache>> out;
  auto kv = std::make_shared<KVCache>();
  KV_RETURN_IF_ERROR(kv->UpdateAndFetch(Ramp(DType::kBF16, {1, 4, 300, 64}, 1), Ramp(DType::kBF16, {1, 4, 300, 64}, 2)).status());
  auto rot = std::make_shared<RotatingKVCache>(32, 4);
  for (int i = 0; i < 40; ++i) {
    KV_RETURN_IF_ERROR(rot->UpdateAndFetch(Ramp(DType::kF16, {1, 2, 1, 32}, i), Ramp(DType::kF16, {1, 2, 1, 32}, -i)).status());
  }
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> quant, kv->ToQuantized(64, 4));
  auto mamba = std::make_shared<MambaCache>();
  KV_RETURN_IF_ERROR(mamba->SetSlot(0, Ramp(DType::kF32, {1, 3, 16}, 1)));
  KV_RETURN_IF_ERROR(mamba->SetSlot(1, Ramp(DType::kBF16, {1, 4, 8, 8}, 1)));
  auto child = std::make_shared<KVCache>();
  KV_RETURN_IF_ERROR(child->UpdateAndFetch(Ramp(DType::kF32, {1, 1, 5, 8}, 1), Ramp(DType::kF32, {1, 1, 5, 8}, 3)).status());
  auto arrays = std::make_shared<ArraysCache>(2);
  KV_RETURN_IF_ERROR(arrays->SetSlot(1, Ramp(DType::kF16, {1, 2, 4}, 1)));
  KV_RETURN_IF_ERROR(arrays->SetSlot(0, Ramp(DType::kF32, {1, 3}, 1)));
  auto list = std::make_shared<CacheList>(std::vector<std::shared_ptr<Cache>>{child, arrays});
  out.push_back({"built_kv_bf16", {kv, kv}});
  out.push_back({"built_rotating_wrapped", {rot}});
  out.push_back({"built_quantized", {quant}});
  out.push_back({"built_mamba", {mamba}});
  out.push_back({"built_cachelist", {list}});
  return out;
}

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "write_interop_files: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_interop_files FIXTURES_DIR OUT_DIR\n");
    return 1;
  }
  Env* env = Env::Default();
  const fs::path out_dir = argv[2];
  fs::create_directories(out_dir);
  std::vector<std::pair<std::string, PromptCache>> caches;
  std::vector<fs::path> fixtures;
  for (const auto& e : fs::directory_iterator(argv[1])) {
    if (e.path().extension() == ".safetensors") fixtures.push_back(e.path());
  }
  std::sort(fixtures.begin(), fixtures.end());
  for (const fs::path& p : fixtures) {
    auto loaded = LoadPromptCache(env, p.string());
    if (!loaded.ok()) return Fail(p.string(), loaded.status());
    for (auto& layer : loaded->cache) {
      if (layer->IsTrimmable()) {
        auto trimmed = layer->Trim(2);
        if (!trimmed.ok()) return Fail(p.string(), trimmed.status());
      }
    }
    caches.push_back({p.stem().string(), std::move(loaded->cache)});
  }
  auto built = BuiltCaches();
  if (!built.ok()) return Fail("building caches", built.status());
  for (auto& c : *built) caches.push_back(std::move(c));

  Json manifest = Json::MakeArray();
  const Metadata metadata = {{"model", "kvstore-interop"}, {"writer", "libkvstore"}};
  for (const auto& [name, cache] : caches) {
    for (const Variant& v : Variants()) {
      auto layers = Describe(cache, v.flat_arrays());
      if (!layers.ok()) return Fail(name, layers.status());
      const std::string file = name + "." + v.name + ".safetensors";
      Status s = SavePromptCache(env, (out_dir / file).string(), cache, metadata, v.options);
      if (!s.ok()) return Fail(file, s);
      Json entry = Json::MakeObject();
      entry["file"] = Json(file);
      entry["flat_arrays"] = Json(v.flat_arrays());
      entry["layers"] = *layers;
      Json md = Json::MakeObject();
      for (const auto& [k, val] : metadata) md[k] = Json(val);
      entry["metadata"] = std::move(md);
      manifest.Push(std::move(entry));
    }
  }
  const std::string text = manifest.Dump();
  Status s = WriteStringAtomic(env, (out_dir / "manifest.json").string(), std::as_bytes(std::span(text)));
  if (!s.ok()) return Fail("manifest", s);
  std::printf("wrote %zu files\n", manifest.as_array().size());
  return 0;
}
