// The sealed value decoder (docs/format.md §8.6): the input is the plain
// value a writer would seal. Sealed under a namespace's key it must decode
// or be refused without crashing, and what it accepts must rebuild; the
// same envelope with one bit flipped (at a place the input chooses) or cut
// short must be refused, as forged. The raw input is also tried as an
// envelope and as a (sealed and plain) namespace record.
#include <cstdlib>

#include "libkvstore/shared_tier/namespace_record.h"
#include "libkvstore/shared_tier/sealed_value.h"
#include "tests/fuzz/shared_chunk_fuzz.h"

namespace {

// Refused as forged, and the value left as it was (for a conditional delete).
void Refused(std::string value, const kvstore::ChunkRequest& request) {
  kvstore::ChunkFault fault = kvstore::ChunkFault::kCorrupt;
  auto bytes = std::make_shared<std::string>(value);
  if (kvstore::DecodeChunk(bytes, request, &fault).ok() || fault != kvstore::ChunkFault::kForged || *bytes != value) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvstore::ChunkSealing sealing{"fuzz secret", "kvstore:"};
  static const kvstore::ChunkNamespace ns = kvstore::MakeChunkNamespace(fuzz::Model(), fuzz::kChunk, sealing);
  static const std::vector<kvstore::LeafInfo> leaves = kvstore::LeavesOf(fuzz::Model().spec()).value();
  static const std::vector<int32_t> tokens = {1, 2, 3, 4};
  static const kvstore::Sha256Digest chain = kvstore::ChainHashes(ns, tokens, 1)[0];
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (kvstore::ChunkKind kind : {kvstore::ChunkKind::kRows, kvstore::ChunkKind::kSnapshot}) {
    const std::string key = kvstore::ChunkKey(sealing.key_prefix, ns, kind, chain);
    const kvstore::ChunkRequest request{key, kind, &ns, 0, tokens, &chain, nullptr, &leaves};
    std::string sealed(input);
    if (!kvstore::SealInPlace(sealed, ns.value_key, key, kvstore::DigestBytes(ns.digest)).ok()) std::abort();
    auto bytes = std::make_shared<std::string>(sealed);
    kvstore::Result<kvstore::DecodedChunk> chunk = kvstore::DecodeChunk(bytes, request);
    if (chunk.ok()) {
      fuzz::CheckRebuilds(leaves, kind, *chunk);
    } else if (*bytes != sealed) {
      std::abort();  // a refused value is left as it was stored
    }
    // Any changed bit, and any cut, is refused.
    std::string flipped = sealed;
    const size_t at = size > 0 ? (data[0] * 131 + size) % flipped.size() : 0;
    flipped[at] = static_cast<char>(flipped[at] ^ (1 << (size % 8)));
    Refused(std::move(flipped), request);
    Refused(sealed.substr(0, sealed.size() - 1 - size % sealed.size()), request);
    // The raw input as an envelope.
    (void)kvstore::DecodeChunk(std::make_shared<std::string>(input), request);
  }
  (void)kvstore::DecodeNamespaceRecord(sealing, "kvstore:v2/m/x", input);
  (void)kvstore::DecodeNamespaceRecord({}, "kvstore:v2/m/x", input);
  return 0;
}
