// What a cache class tells the prompt-reuse code about itself, so that code
// never switches on class names:
//   * CacheSpec: the fingerprint fields of one layer (docs/format.md §8.1),
//     which Cache::DescribeSpec fills from a live cache;
//   * CacheClassInfo: per class, which of those fields it has and how the
//     shared tier chunks it (docs/format.md §8.3).
// Thread safety: plain values and a constant table; all functions are pure.
#ifndef KVSTORE_CACHE_SPEC_H_
#define KVSTORE_CACHE_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/dtype.h"

namespace kvstore {

// One ArraysCache slot: dtype and shape without the batch axis.
struct SlotSpec {
  DType dtype = DType::kF32;
  Shape shape{};
};

// One layer's cache. Fields that do not apply to the class stay 0/empty
// (CacheClassInfo says which apply).
struct CacheSpec {
  std::string class_name{};   // as Cache::class_name()
  DType dtype = DType::kF16;  // attention: keys/values (QuantizedKVCache: its scales)
  int64_t kv_heads = 0;       // attention classes
  int64_t k_head_dim = 0;
  int64_t v_head_dim = 0;
  int group_size = 0;         // QuantizedKVCache
  int bits = 0;
  int64_t max_size = 0;       // RotatingKVCache, BatchRotatingKVCache
  int64_t keep = 0;           // RotatingKVCache
  int64_t chunk_size = 0;     // ChunkedKVCache
  std::vector<SlotSpec> slots{};     // ArraysCache, MambaCache
  std::vector<CacheSpec> children{}; // CacheList
};

// How the shared tier cuts a leaf of this class into token chunks.
enum class ChunkRule {
  kNotChunkable,  // refused (ConcatenateKVCache, the batch caches)
  kRows,          // chunk i holds rows [iC, (i+1)C) of the token axis
  kRotatingRows,  // rows while (i+1)C <= max_size and no row was dropped;
                  // any boundary also served by a snapshot
  kSnapshot,      // only a snapshot of the whole state at a boundary
  kChildren,      // a container: its children are the leaves
};

struct CacheClassInfo {
  std::string_view name{};
  ChunkRule chunk_rule = ChunkRule::kNotChunkable;
  // Which fingerprint fields its CacheSpec has (format §8.1):
  bool attention = false;   // dtype, heads, k_dim, v_dim
  bool quantized = false;   // bits, group_size; rows are (packed, scales,
                            // biases) triples for keys and for values
  bool max_size = false;
  bool keep = false;
  bool chunk_size = false;
  bool slots = false;
  bool children = false;
  size_t required_slots = 0;  // 0: any count
  // The class a prompt-cache file holds it under (MambaCache is saved as
  // an ArraysCache, as mlx-lm does).
  std::string_view saved_as{};
  // The class a chunk of its rows is stored as (empty: no rows).
  std::string_view rows_piece{};
  // Its saved layout differs between mlx-lm releases (docs/format.md §5.7),
  // so the imported mlx-lm's own loader may read a file of it otherwise.
  bool saved_layout_by_release = false;
};

// The info of a class CacheFromState knows, or nullptr.
const CacheClassInfo* FindCacheClass(std::string_view class_name);

}  // namespace kvstore

#endif  // KVSTORE_CACHE_SPEC_H_
