// A shared-tier value is hostile: DecodeChunk must refuse or accept any
// bytes without crashing, for both kinds of value, with and without a
// secret; what it accepts must rebuild into a cache of the asked length.
#include <cstdlib>
#include <memory>
#include <string>

#include "libkvstore/reuse/chunk_codec.h"

namespace {

constexpr int64_t kChunk = 4;

// A KVCache, a RotatingKVCache and a CacheList(ArraysCache, QuantizedKVCache).
const kvstore::ModelFingerprint& Model() {
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvstore::ChunkNamespace ns = kvstore::MakeChunkNamespace(Model(), kChunk);
  static const std::vector<kvstore::LeafInfo> leaves = kvstore::LeavesOf(Model().spec()).value();
  static const std::vector<int32_t> tokens = {1, 2, 3, 4};
  static const kvstore::Sha256Digest chain = kvstore::ChainHashes(ns, tokens, 1)[0];
  auto value = std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size);
  for (kvstore::ChunkKind kind : {kvstore::ChunkKind::kRows, kvstore::ChunkKind::kSnapshot}) {
    for (std::string_view secret : {std::string_view(), std::string_view("s")}) {
      const std::string key = kvstore::ChunkKey("kvstore:", ns, kind, chain);
      kvstore::ChunkRequest request{key, kind, &ns, 0, tokens, &chain, nullptr, &leaves, secret};
      kvstore::Result<kvstore::DecodedChunk> chunk = kvstore::DecodeChunk(value, request);
      if (!chunk.ok() || kind != kvstore::ChunkKind::kRows) continue;
      kvstore::RebuildInputs inputs;
      inputs.tokens = kChunk;
      for (auto& [path, rows] : chunk->rows) inputs.rows[path].push_back(rows);
      (void)kvstore::RebuildPromptCache(Model().spec(), inputs);  // snapshot layers missing: an error, no crash
    }
  }
  return 0;
}
