// Layouts of prompt-cache files (docs/format.md §5): how a safetensors
// header's tensor names and metadata map to per-layer class names, states
// and meta states, for mlx-lm (v1), its legacy "{i}_keys" format and
// mlx-swift-lm; and the reverse mapping used when writing.
//
// Parsing reads only the header. Every layer is described in mlx-lm's shape
// (the trees CacheFromState takes) whatever the file's layout, next to the
// class name and meta state as stored (for inspection).
#ifndef KVSTORE_LIBKVSTORE_FORMAT_LAYOUT_H_
#define KVSTORE_LIBKVSTORE_FORMAT_LAYOUT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvstore/cache.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/safetensors.h"
#include "libkvstore/format/tree.h"

namespace kvstore {

// Arrays of some of a header's tensors, by tensor index.
using TensorArrays = std::unordered_map<size_t, Array>;

// A state tree whose leaves are header tensor indices, or values the file
// carries otherwise: small arrays in the metadata (mlx-swift-lm's left
// padding), mlx-lm 0.32's scalars and strings (read from their tensors).
struct TensorTree {
  enum class Kind { kNone, kTensor, kValue, kList };
  Kind kind = Kind::kList;
  size_t tensor = 0;  // kTensor
  CacheState value;   // kValue: an array or a scalar
  std::vector<TensorTree> items;  // kList

  static TensorTree Tensor(size_t index);
  static TensorTree Value(CacheState value);
  static TensorTree None();
  // The CacheState with `arrays[i]` for tensor i.
  // REQUIRES: `arrays` holds every tensor of the tree.
  CacheState Resolve(const TensorArrays& arrays) const;
};

struct ParsedLayer {
  std::string class_name;    // the class to build (mlx-lm's spelling)
  std::string stored_class;  // as written in the file
  MetaState meta;            // in mlx-lm's shape
  MetaState stored_meta;     // as written in the file
  TensorTree state;          // in mlx-lm's shape
  std::vector<size_t> tensors;  // every tensor of the layer (header indices)
  std::vector<ParsedLayer> children;  // CacheList children
  // mlx-swift-lm: a cache saved before its first update (no tensors); built
  // from the meta state alone.
  bool empty_state = false;
  // mlx-swift-lm CacheList: built from `children` rather than from mlx-lm's
  // nested state.
  bool build_from_children = false;
  // Written in an mlx-lm layout, so its state must be one mlx-lm's
  // save_prompt_cache writes (Cache::CheckSavedState, docs/format.md §5.8).
  // mlx-swift-lm's caches keep other invariants (e.g. a RotatingKVCache
  // trimmed after a wrap holds fewer rows than its offset).
  bool saved_by_mlx_lm = true;
  // mlx-lm 0.32's layout: `state` is the class's whole state
  // (CacheFromFullState); `meta` is unused.
  bool full_state = false;
  // Set by CheckLayers for a layer that builds: its offset after load
  // (0.32 layers; the others use OffsetAfterLoad).
  std::optional<int64_t> built_offset;
  // Set when the layer can be inspected but not loaded (a class only
  // mlx-swift-lm has).
  Status unsupported;
  // Set by CheckLayers when a load would refuse the layer: Corruption naming
  // the class's rule, NotSupported for a class kvstore does not know.
  Status problem;
};

struct ParsedFile {
  PromptCacheLayout layout = PromptCacheLayout::kMlxLm;
  std::vector<ParsedLayer> layers;
  Metadata user;  // kvstore_* keys excluded
  bool has_digests = false;
  // Set when the file can be inspected but not loaded (mlx-swift-lm model
  // state, which kvstore cannot represent).
  Status unsupported;
};

// Reads tensors of the header by index: mlx-lm 0.32 stores scalars and
// strings (offsets, CacheList children's class names) as tensors, which the
// layout needs.
using TensorFetch = std::function<Result<TensorArrays>(const std::vector<size_t>& indices)>;

// Detects the layout and maps every layer. NotSupported names what was
// found for layouts we recognise but cannot read (mlx-lm v2, other keys);
// Corruption for inconsistent files, naming the layer and the rule. `fetch`
// reads the few small tensors of a 0.32 file's scalars.
Result<ParsedFile> ParseLayout(const SafetensorsHeader& header, const TensorFetch& fetch);

// The detection rule of mlx-lm 0.32's layout (docs/format.md §5.2): the
// metadata holds "2.0" and it is empty (0.32's scalar list always starts
// with ""; every older layout stores layer 0's class name there).
bool IsMlxLm032Metadata(const Metadata& metadata);
// Where a file's user metadata (and kvstore's keys) live: "0." in 0.32's
// layout, "1." in every other.
std::string_view UserPrefix(PromptCacheLayout layout);

// ---- mlx-lm 0.32 (layout_032.cc) ----
// Maps a file detected as mlx-lm 0.32 into `out`.
Status ParseMlxLm032(const SafetensorsHeader& header, const TensorFetch& fetch, ParsedFile& out);
// mlx's tree_unflatten of one layer's tensor names; gaps become empty lists.
Result<TensorTree> TreeFromNames(const NameTree& node);
// Every tensor index of `tree`, depth first.
void CollectTensors(const TensorTree& tree, std::vector<size_t>& out);

// Builds layer `layer` from its parsed description; `arrays` holds (at
// least) this layer's tensors.
Result<std::unique_ptr<Cache>> BuildLayer(const ParsedLayer& layer, const TensorArrays& arrays);

// A BuildLayer error as a load reports it: a state the class refuses is a
// malformed file (Corruption), a class we do not know a file we cannot read
// (NotSupported).
Status FileError(const Status& build_error);

// Header-only validation (layer_check.cc): sets each layer's `problem` to
// what BuildLayer would return for it, building it over placeholder arrays
// with the header's dtypes and shapes; reads no tensor byte.
// ResourceExhausted when the placeholders cannot be mapped.
Status CheckLayers(const SafetensorsHeader& header, std::vector<ParsedLayer>& layers);

// The offset the layer's cache has after load, from the header alone;
// nullopt for classes without a scalar offset.
std::optional<int64_t> OffsetAfterLoad(const ParsedLayer& layer, const SafetensorsHeader& header);

// ---- The two mlx-lm layouts of ArraysCache (layout_arrays.cc) ----

// mlx-lm's current ArraysCache state [slots, None, None] around a flat slot
// list (None padding is mlx-lm's empty F32 array).
TensorTree ArraysStateFromSlots(TensorTree slots);

// Which ArraysCache layouts a layer uses (CacheList children included).
struct ArraysCacheForms {
  bool release = false;  // mlx-lm 0.31's flat slot list
  bool current = false;  // [slots, left_padding, lengths]
};
// Rewrites every ArraysCache/MambaCache state of `layer` laid out as mlx-lm
// 0.31 wrote it into the current shape, so both load alike.
ArraysCacheForms NormalizeArraysCaches(ParsedLayer& layer);

// The state and meta_state the mlx-lm of `layout` saves for `cache`:
// ArraysCaches in that version's layout (InvalidArgument for padding the
// 0.31 layout cannot hold: NotSupported), MambaCache children named ArraysCache.
Result<CacheState> MlxLmState(const Cache& cache, PromptCacheLayout layout);
MetaState MlxLmMeta(const Cache& cache);

// ---- mlx-swift-lm (layout_swift.cc, layout_swift_write.cc) ----

// mlx-swift-lm's model state (which kvstore cannot load): "1.<prefix>*"
// metadata keys, "<tensor prefix>*" tensors and class names carrying the
// class prefix.
inline constexpr std::string_view kSwiftStatePrefix = "__mlx_lm_state_";
inline constexpr std::string_view kSwiftStateClassPrefix = "__mlx_lm_state_v1__:";
inline constexpr std::string_view kSwiftStateTensorPrefix = "__mlx_lm_state_tensor_";

// Deepest CacheList nesting read or written in mlx-swift-lm's flat layout.
inline constexpr int kMaxSwiftCacheListDepth = 8;

// The "0." and "2." metadata of a file as trees, and the class names.
struct MetaTrees {
  NameTree tree;                    // "0.*" and "2.*" keys
  std::vector<std::string> values;  // indexed by NameTree::leaf
  std::vector<std::string> classes;
};

// True when the file is laid out as mlx-swift-lm writes it (docs/format.md §5.6):
// its KVCache/RotatingKVCache/QuantizedKVCache/ArraysCache/CacheList metas
// have Swift's shapes, or a class only Swift has appears. Corruption when
// some layers look like mlx-lm and others like mlx-swift-lm.
Result<bool> IsSwiftLayout(const SafetensorsHeader& header, const MetaTrees& meta);

// Maps a file detected as mlx-swift-lm into `out.layers`.
Status ParseSwiftLayers(const SafetensorsHeader& header, const MetaTrees& meta, ParsedFile& out);

// ---- Writing ----

// One layer flattened for a file: tensor names and metadata keys carry the
// layer index ("3.0", "0.3.1", "2.3").
struct FlatLayer {
  std::vector<NamedArray> tensors;
  Metadata metadata;  // meta-state entries and the class-name entry
  // mlx-lm 0.32: (tensor name, kind) of each scalar, string and None, in
  // tree_flatten order; the writer numbers them "2.k" across layers.
  std::vector<std::pair<std::string, std::string>> scalars;
};

// mlx-lm's save_prompt_cache flattening of layer `index` as the mlx-lm of
// `layout` (kMlxLm or kMlxLm031) lays it out. InvalidArgument for a cache
// that mlx-lm cannot save (empty, a None slot), NotSupported for one that
// layout cannot hold (ArraysCache padding in kMlxLm031).
Result<FlatLayer> FlattenLayerMlxLm(const Cache& cache, size_t index, PromptCacheLayout layout);
// mlx-lm 0.32's save_prompt_cache flattening of layer `index`: the class's
// FullState, scalars as 0-d tensors (I32, I64 when it does not fit, BOOL),
// strings as I32 code points, None as F32 [0]. InvalidArgument for a cache
// 0.32 cannot save or would not load back (no tensor at all: its loader
// would drop the layer).
Result<FlatLayer> FlattenLayerMlxLm032(const Cache& cache, size_t index);
// mlx-swift-lm's savePromptCache flattening of layer `index`. NotSupported
// for classes mlx-swift-lm cannot load (the batch caches).
Result<FlatLayer> FlattenLayerSwift(const Cache& cache, size_t index);

// The flattening of `layout` (Swift, 0.32 or the older mlx-lm ones).
Result<FlatLayer> FlattenLayer(const Cache& cache, size_t index, PromptCacheLayout layout);

// Sets info.loads_in_mlx_lm_031/032 and info.mlx_lm_warnings for a parsed
// file (mlx_lm_loaders.cc). REQUIRES: info's layers are described.
void DescribeMlxLmLoaders(const ParsedFile& parsed, const SafetensorsHeader& header, PromptCacheInfo& info);

// Checks a user-metadata key for `layout`: InvalidArgument when the key would
// be misread by that layout's loader or is reserved.
Status CheckUserKey(const std::string& key, PromptCacheLayout layout);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_LAYOUT_H_
