// How a prompt cache is cut into the shared tier's token chunks and rebuilt
// from them (docs/format.md §8.3). The unit is a leaf: a layer's cache, or
// a CacheList child (recursively), addressed by its path ("3", "5.1").
//
// Each class says which rule it follows (CacheClassInfo::chunk_rule), how
// its rows are read (Cache::RowsByPosition) and rebuilt (CacheFromRows):
//   rows leaves      KVCache, QuantizedKVCache, ChunkedKVCache: chunk i
//                    holds the leaf's rows [iC, (i+1)C) along the token axis
//                    (quantized triples sliced alike: MLX quantizes along
//                    the head dim, so a row never straddles two chunks).
//                    A chunk is written only with every rows leaf complete.
//   rotating leaves  RotatingKVCache: chunk i holds its rows when
//                    (i+1)C <= max_size and the writer's window has not
//                    dropped a row yet (optional); any boundary is also
//                    served by a snapshot.
//   snapshot leaves  ArraysCache, MambaCache: only a snapshot of the state
//                    at a boundary, where the writer had it.
//
// Not thread-safe by itself: values are built and consumed by one thread.
#ifndef KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_LAYOUT_H_
#define KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_LAYOUT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/model_fingerprint.h"

namespace kvstore {

enum class LeafKind { kRows, kRotating, kSnapshot };

struct LeafInfo {
  std::string path;
  const CacheSpec* spec = nullptr;  // points into the fingerprint's spec
  LeafKind kind = LeafKind::kRows;
  const CacheClassInfo* cls = nullptr;  // the class's info; never null
};

// The leaves of a model in depth-first order. NotSupported for a class the
// shared tier cannot chunk (ConcatenateKVCache, the batch caches).
Result<std::vector<LeafInfo>> LeavesOf(const ModelSpec& spec);
// The leaf caches of `cache`, in the same order as LeavesOf. REQUIRES: the
// cache matches the spec (ModelFingerprint::Check).
std::vector<const Cache*> LeafCaches(const PromptCache& cache);

// The rows [a, b) of one leaf along the token axis, as views: {keys,
// values} or, quantized, {k_wq, k_scales, k_biases, v_wq, v_scales,
// v_biases}; each [1, H, b - a, *].
using LeafRows = std::vector<Array>;

// The rows a leaf cache holds, by absolute token position: all of them, or
// for a ChunkedKVCache those from its start_position on, or for a
// RotatingKVCache all of them (in temporal order) until it drops one.
class LeafRowSource {
 public:
  // `leaf` holds `tokens` positions. InvalidArgument when its offset
  // disagrees or its batch is not 1.
  static Result<LeafRowSource> Of(const Cache& leaf, const LeafInfo& info, int64_t tokens);
  // The rows [a, b), or nullopt when the leaf no longer holds all of them.
  std::optional<LeafRows> Rows(int64_t a, int64_t b) const;

 private:
  struct Segment {
    int64_t first = 0;  // position of row 0
    int64_t count = 0;
    LeafRows arrays;
  };
  std::vector<Segment> segments_;
};

// A chunk piece as a cache the file writer can save (KVCache or
// QuantizedKVCache holding just these rows).
Result<std::shared_ptr<Cache>> RowsPiece(const LeafInfo& info, const LeafRows& rows);
// The rows a piece read back holds, checked against the leaf's spec:
// batch 1, heads, head dims, dtype, and exactly `count` rows. Corruption
// naming what differs.
Result<LeafRows> RowsOfPiece(const Cache& piece, const LeafInfo& info, int64_t count);
// Checks a snapshot piece read back: the leaf's class (a MambaCache is
// saved as an ArraysCache) and spec, batch 1 and, for a RotatingKVCache,
// offset == tokens. Corruption otherwise.
Status CheckSnapshotPiece(const Cache& piece, const LeafInfo& info, int64_t tokens);

// What a boundary is rebuilt from: per leaf path, the rows of chunks
// 0..k-1 (rows and rotating leaves) or a snapshot cache.
struct RebuildInputs {
  int64_t tokens = 0;  // k * C
  std::map<std::string, std::vector<LeafRows>> rows;  // path -> k pieces
  std::map<std::string, std::shared_ptr<const Cache>> snapshots;
};

// The prompt cache at `inputs.tokens` for the model: every leaf from its
// rows (concatenated into new buffers) or its snapshot (a copy-on-write
// copy). InvalidArgument when a leaf has neither.
Result<PromptCache> RebuildPromptCache(const ModelSpec& spec, const RebuildInputs& inputs);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_SHARED_TIER_CHUNK_LAYOUT_H_
