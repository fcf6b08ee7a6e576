// Looking into a shared tier's store from tools (kvtool ls / inspect with a
// redis:// URL): its namespaces, the chains of chunks in one, and single
// chunks, from their headers (GETRANGE) where possible. Read-only; values
// are parsed as hostile input.
//
// Thread safety: functions are reentrant; they use only the backend.
#ifndef KVSTORE_SHARED_TIER_ADMIN_H_
#define KVSTORE_SHARED_TIER_ADMIN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/kv_backend.h"
#include "kvstore/model_fingerprint.h"
#include "kvstore/safetensors.h"
#include "kvstore/status.h"

namespace kvstore {

struct SharedNamespaceInfo {
  std::string id;  // 32 hex digits
  std::string key;
  int64_t chunk_tokens = 0;
  std::optional<ModelFingerprint> fingerprint;  // unset when the descriptor is unreadable
  std::string error;                            // why it is
  int64_t chunks = 0;     // rows values found by the scan
  int64_t snapshots = 0;  // snapshot values found by the scan
};

// Every namespace under `key_prefix` (its descriptor), with the number of
// chunks and snapshots a scan of at most `limit` keys per namespace finds.
Result<std::vector<SharedNamespaceInfo>> ListSharedNamespaces(KvBackend& backend, std::string_view key_prefix,
                                                              size_t limit = 1000000);

struct SharedChunkInfo {
  std::string key;
  bool snapshot = false;
  int64_t index = 0;  // chain position: tokens [index * C, (index + 1) * C)
  int64_t chunk_tokens = 0;
  std::string ns_digest, chain, parent, writer;
  std::vector<std::string> layers;  // leaf path of each file layer
  std::vector<std::string> classes;  // class of each file layer
  std::vector<TensorInfo> tensors;   // names, dtypes, shapes
  bool sealed = false;               // carries an HMAC seal
  bool compressed = false;
  uint64_t value_bytes = 0;  // 0 when only the header was read
};

// A chunk's header: for a plain value two GETRANGE calls (length, then
// header), for a compressed one the whole value. NotFound when the key is
// absent; Corruption when the value is not a chunk.
Result<SharedChunkInfo> ReadSharedChunkInfo(KvBackend& backend, std::string_view key);

// Reads the whole value and checks, with a secret, its seal against its
// key; that it is the chunk its key names (kind, namespace and chain hash,
// the chain hash following from the value's parent and tokens), which
// without a secret is what shows a value copied under another key; and its
// digests. OK, or Corruption naming the failed check (for a copied value,
// both chain hashes).
Status VerifySharedChunk(KvBackend& backend, std::string_view key, std::string_view secret);

// One tree of chunks: a first chunk (index 0) and every chunk that
// descends from it through parent links.
struct SharedChainInfo {
  std::string root;     // key of the first chunk
  int64_t chunks = 0;   // in the tree
  int64_t longest = 0;  // chunks on its longest path (tokens: longest * C)
  int64_t leaves = 0;   // distinct continuations
  int64_t snapshots = 0;
  std::vector<std::string> writers;
};

// The chains of namespace `ns_id`, from the headers of at most `limit`
// values, longest first. Chunks whose parent was not found (evicted) are
// reported as chains of their own, rooted at them.
Result<std::vector<SharedChainInfo>> ListSharedChains(KvBackend& backend, std::string_view key_prefix,
                                                      std::string_view ns_id, size_t limit = 100000);

}  // namespace kvstore

#endif  // KVSTORE_SHARED_TIER_ADMIN_H_
