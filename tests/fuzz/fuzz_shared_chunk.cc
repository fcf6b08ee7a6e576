// A shared-tier value is hostile: DecodeChunk must refuse or accept any
// bytes without crashing, for both kinds of value; what it accepts must
// rebuild into a cache of the asked length. (Sealed values: fuzz_sealed_value.)
#include "tests/fuzz/shared_chunk_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvstore::ChunkNamespace ns = kvstore::MakeChunkNamespace(fuzz::Model(), fuzz::kChunk);
  static const std::vector<kvstore::LeafInfo> leaves = kvstore::LeavesOf(fuzz::Model().spec()).value();
  static const std::vector<int32_t> tokens = {1, 2, 3, 4};
  static const kvstore::Sha256Digest chain = kvstore::ChainHashes(ns, tokens, 1)[0];
  auto value = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  for (kvstore::ChunkKind kind : {kvstore::ChunkKind::kRows, kvstore::ChunkKind::kSnapshot}) {
    const std::string key = kvstore::ChunkKey("kvstore:", ns, kind, chain);
    kvstore::ChunkRequest request{key, kind, &ns, 0, tokens, &chain, nullptr, &leaves};
    kvstore::Result<kvstore::DecodedChunk> chunk = kvstore::DecodeChunk(value, request);
    if (chunk.ok()) fuzz::CheckRebuilds(leaves, kind, *chunk);
  }
  return 0;
}
