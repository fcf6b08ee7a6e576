// What the shared-chunk fuzz targets share: a model with a leaf of every
// kind, and the inputs the other values of a boundary would give a rebuild.
#ifndef KVSTORE_TESTS_FUZZ_SHARED_CHUNK_FUZZ_H_
#define KVSTORE_TESTS_FUZZ_SHARED_CHUNK_FUZZ_H_

#include <cstdlib>
#include <memory>
#include <string>

#include "kvstore/arrays_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/shared_tier/chunk_codec.h"

namespace fuzz {

constexpr int64_t kChunk = 4;

// A KVCache, a RotatingKVCache and a CacheList(ArraysCache, QuantizedKVCache).
inline const kvstore::ModelFingerprint& Model() {
  using kvstore::CacheSpec;
  static const kvstore::ModelFingerprint fp = [] {
    CacheSpec kv{.class_name = "KVCache", .kv_heads = 2, .k_head_dim = 8, .v_head_dim = 8};
    CacheSpec rot = kv;
    rot.class_name = "RotatingKVCache";
    rot.max_size = 8;
    CacheSpec q{.class_name = "QuantizedKVCache", .kv_heads = 1, .k_head_dim = 32, .v_head_dim = 32,
                .group_size = 32, .bits = 4};
    CacheSpec arrays{.class_name = "ArraysCache", .slots = {kvstore::SlotSpec{kvstore::DType::kF32, {2, 3}}}};
    CacheSpec list{.class_name = "CacheList", .children = {arrays, q}};
    return kvstore::ModelFingerprint::Make({.model_id = "fuzz", .layers = {kv, rot, list}}).value();
  }();
  return fp;
}

// What a fetch takes from the values of the other kind at this boundary:
// for a rows value, snapshots of the leaves it has no rows for; for a
// snapshot value, zero rows of the rows leaves. What the value itself must
// carry is never filled in.
inline void CompleteInputs(const std::vector<kvstore::LeafInfo>& leaves, kvstore::ChunkKind kind,
                    kvstore::RebuildInputs& inputs) {
  using kvstore::Array;
  using kvstore::DType;
  for (const kvstore::LeafInfo& leaf : leaves) {
    const kvstore::CacheSpec& s = *leaf.spec;
    if (inputs.rows.count(leaf.path) > 0 || inputs.snapshots.count(leaf.path) > 0) continue;
    if ((kind == kvstore::ChunkKind::kSnapshot) != (leaf.kind == kvstore::LeafKind::kRows)) continue;
    if (leaf.kind == kvstore::LeafKind::kRows && s.class_name == "QuantizedKVCache") {
      const Array wq = Array::Zeros(DType::kU32, {1, s.kv_heads, kChunk, s.k_head_dim * s.bits / 32});
      const Array scales = Array::Zeros(s.dtype, {1, s.kv_heads, kChunk, s.k_head_dim / s.group_size});
      inputs.rows[leaf.path].push_back({wq, scales, scales, wq, scales, scales});
    } else if (leaf.kind == kvstore::LeafKind::kRows) {
      const Array kv = Array::Zeros(s.dtype, {1, s.kv_heads, kChunk, s.k_head_dim});
      inputs.rows[leaf.path].push_back({kv, kv});
    } else if (leaf.kind == kvstore::LeafKind::kRotating) {
      auto window = std::make_shared<kvstore::RotatingKVCache>(s.max_size, s.keep);
      const Array kv = Array::Zeros(s.dtype, {1, s.kv_heads, kChunk, s.k_head_dim});
      if (!window->UpdateAndFetch(kv, kv).ok()) std::abort();
      inputs.snapshots[leaf.path] = window;
    } else {
      auto arrays = std::make_shared<kvstore::ArraysCache>(s.slots.size());
      for (size_t i = 0; i < s.slots.size(); ++i) {
        kvstore::Shape shape = {1};
        shape.insert(shape.end(), s.slots[i].shape.begin(), s.slots[i].shape.end());
        if (!arrays->SetSlot(i, Array::Zeros(s.slots[i].dtype, shape)).ok()) std::abort();
      }
      inputs.snapshots[leaf.path] = arrays;
    }
  }
}

// Rebuilds what DecodeChunk accepted, completed as above; aborts unless it
// gives a cache of every layer (an accepted value must always rebuild).
inline void CheckRebuilds(const std::vector<kvstore::LeafInfo>& leaves, kvstore::ChunkKind kind,
                          const kvstore::DecodedChunk& chunk) {
  kvstore::RebuildInputs inputs;
  inputs.tokens = kChunk;
  for (auto& [path, rows] : chunk.rows) inputs.rows[path].push_back(rows);
  inputs.snapshots = chunk.snapshots;
  CompleteInputs(leaves, kind, inputs);
  kvstore::Result<kvstore::PromptCache> rebuilt = kvstore::RebuildPromptCache(Model().spec(), inputs);
  if (!rebuilt.ok() || rebuilt->size() != Model().spec().layers.size()) std::abort();
}

}  // namespace fuzz

#endif  // KVSTORE_TESTS_FUZZ_SHARED_CHUNK_FUZZ_H_
