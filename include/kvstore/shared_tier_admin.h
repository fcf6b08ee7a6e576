// Looking into a shared tier's store from tools (kvtool ls / inspect with a
// redis:// URL): its namespaces, the chains of chunks in one, and single
// chunks, from their headers (GETRANGE) where possible. Read-only; values
// are parsed as hostile input. Under a sealed key prefix (docs/format.md
// §8.6) values and descriptors are encrypted: without the secret a tool
// sees that they are sealed and their sizes; with it (`secret`) it reads
// them like plain ones.
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
// A sealed descriptor is read with `secret`; without it, its error says so.
Result<std::vector<SharedNamespaceInfo>> ListSharedNamespaces(KvBackend& backend, std::string_view key_prefix,
                                                              size_t limit = 1000000, std::string_view secret = {});

struct SharedChunkInfo {
  std::string key;
  bool snapshot = false;
  int64_t index = 0;  // chain position: tokens [index * C, (index + 1) * C)
  int64_t chunk_tokens = 0;
  std::string ns_digest, chain, parent, writer;
  std::vector<std::string> layers;  // leaf path of each file layer
  std::vector<std::string> classes;  // class of each file layer
  std::vector<TensorInfo> tensors;   // names, dtypes, shapes
  bool sealed = false;               // an AES-256-GCM envelope (§8.6)
  bool opened = true;                // false: sealed and read without the secret (only kind, chain, size known)
  bool compressed = false;
  uint64_t value_bytes = 0;  // 0 when only the header was read
};

// A chunk's header: for a plain value two GETRANGE calls (length, then
// header), for a compressed or sealed one the whole value. A sealed value
// is decrypted with `secret` (its namespace's descriptor gives the keys);
// without it the info says only that it is sealed, its size, and what the
// key names. NotFound when the key is absent; Corruption when the value is
// not a chunk or its envelope does not open under `secret`.
Result<SharedChunkInfo> ReadSharedChunkInfo(KvBackend& backend, std::string_view key, std::string_view secret = {});

// Reads the whole value and checks it: a sealed value opens under `secret`
// (which a sealed value needs and a plain one must not be given); that it
// is the chunk its key names (kind, namespace and chain hash, the chain
// hash following from the value's parent and tokens), which without a
// secret is what shows a value copied under another key; and, unsealed,
// its digests. OK, or Corruption naming the failed check (for a copied
// value, both chain hashes).
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
// Sealed chunks are read with `secret`; without it each is a chain of its own.
Result<std::vector<SharedChainInfo>> ListSharedChains(KvBackend& backend, std::string_view key_prefix,
                                                      std::string_view ns_id, size_t limit = 100000,
                                                      std::string_view secret = {});

}  // namespace kvstore

#endif  // KVSTORE_SHARED_TIER_ADMIN_H_
