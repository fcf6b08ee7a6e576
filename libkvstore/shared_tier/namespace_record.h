// The shared tier's records (docs/format.md §8.2, §8.6): the namespace
// descriptor <prefix>v2/ns/<ns> and the model record <prefix>v2/m/<M>, both
//   {"chunk_tokens": C, "fingerprint": {...}, "format": "kvstore-namespace/2"}
// sealed under the prefix's record key (bound to the key name) when a
// secret is set. Decoding treats the value as hostile.
// Thread-safe (pure functions).
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_NAMESPACE_RECORD_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_NAMESPACE_RECORD_H_

#include <string>
#include <string_view>

#include "kvstore/model_fingerprint.h"
#include "kvstore/status.h"
#include "libkvstore/shared_tier/chunk_keys.h"

namespace kvstore {

struct NamespaceRecord {
  ModelFingerprint fingerprint;
  int64_t chunk_tokens = 0;
};

// The value of the record stored under `key`.
Result<std::string> EncodeNamespaceRecord(const ChunkSealing& sealing, std::string_view key,
                                          const ModelFingerprint& fingerprint, int64_t chunk_tokens);

// The record stored under `key`; Corruption when it is not one, and with a
// secret when its envelope does not open (`*forged` then set, if given).
Result<NamespaceRecord> DecodeNamespaceRecord(const ChunkSealing& sealing, std::string_view key,
                                              std::string_view value, bool* forged = nullptr);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_NAMESPACE_RECORD_H_
