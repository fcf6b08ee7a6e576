// Cutting leaves into token rows and rebuilding caches from rows and
// snapshots (docs/format.md §8.3).
#include "libkvstore/shared_tier/chunk_layout.h"

#include "kvstore/cache_list.h"
#include "kvstore/chunked_kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/rotating_kv_cache.h"
#include "libkvstore/fingerprint/fingerprint_internal.h"

namespace kvstore {
namespace {

Result<LeafKind> KindOf(const CacheSpec& spec, const std::string& path) {
  const std::string& c = spec.class_name;
  if (c == "KVCache" || c == "QuantizedKVCache" || c == "ChunkedKVCache") return LeafKind::kRows;
  if (c == "RotatingKVCache") return LeafKind::kRotating;
  if (c == "ArraysCache" || c == "MambaCache") return LeafKind::kSnapshot;
  return Status::NotSupported("layer " + path + ": the shared tier cannot chunk a " + c);
}

Status AddLeaves(const CacheSpec& spec, const std::string& path, std::vector<LeafInfo>& out) {
  if (spec.class_name == "CacheList") {
    for (size_t c = 0; c < spec.children.size(); ++c) {
      KV_RETURN_IF_ERROR(AddLeaves(spec.children[c], path + "." + std::to_string(c), out));
    }
    return Status::OK();
  }
  KV_ASSIGN_OR_RETURN(LeafKind kind, KindOf(spec, path));
  out.push_back(LeafInfo{path, &spec, kind});
  return Status::OK();
}

void AddLeafCaches(const Cache& cache, std::vector<const Cache*>& out) {
  if (const auto* list = dynamic_cast<const CacheList*>(&cache)) {
    for (size_t c = 0; c < list->num_children(); ++c) AddLeafCaches(*list->child(c), out);
    return;
  }
  out.push_back(&cache);
}

// mlx-lm's _temporal_order of a rotating buffer: the rows oldest first.
Array TemporalOrder(const RotatingKVCache& r, const Array& v) {
  const int64_t len = v.dim(2), idx = r.idx(), keep = r.keep();
  if (idx == len) return v;
  if (idx < r.offset().value_or(0)) {
    const Array parts[] = {v.Slice(2, 0, keep), v.Slice(2, idx, len), v.Slice(2, keep, idx)};
    return Array::Concatenate(parts, 2);
  }
  return v.Slice(2, 0, idx);
}

// The batch size of a state: the first axis of its arrays; 1 when every
// non-empty array has 1 there.
int64_t BatchOf(const CacheState& state) {
  std::vector<const CacheState*> todo = {&state};
  while (!todo.empty()) {
    const CacheState* s = todo.back();
    todo.pop_back();
    if (s->is_array() && s->array().ndim() >= 1 && s->array().dim(0) != 1 && s->array().numel() > 0) {
      return s->array().dim(0);
    }
    for (size_t i = 0; i < s->size(); ++i) todo.push_back(&(*s)[i]);
  }
  return 1;
}

Status BadPiece(const LeafInfo& info, const std::string& what) {
  return Status::Corruption("layer " + info.path + " (" + info.spec->class_name + "): " + what);
}

// Checks one [1, H, rows, D] array of a piece.
Status CheckPieceArray(const LeafInfo& info, const Array& a, DType dtype, int64_t dim, int64_t count) {
  const CacheSpec& s = *info.spec;
  if (a.ndim() != 4 || a.dim(0) != 1 || a.dim(1) != s.kv_heads || a.dim(2) != count || a.dim(3) != dim ||
      a.dtype() != dtype) {
    return BadPiece(info, "piece " + std::string(DTypeName(a.dtype())) + ShapeToString(a.shape()) + ", expected " +
                              std::string(DTypeName(dtype)) + ShapeToString({1, s.kv_heads, count, dim}));
  }
  return Status::OK();
}

Array ConcatRows(const std::vector<LeafRows>& pieces, size_t which) {
  std::vector<Array> parts;
  parts.reserve(pieces.size());
  for (const LeafRows& p : pieces) parts.push_back(p[which]);
  return Array::Concatenate(parts, 2);
}

Result<std::shared_ptr<Cache>> RebuildLeaf(const CacheSpec& spec, const std::string& path,
                                           const RebuildInputs& inputs) {
  if (spec.class_name == "CacheList") {
    std::vector<std::shared_ptr<Cache>> children;
    for (size_t c = 0; c < spec.children.size(); ++c) {
      KV_ASSIGN_OR_RETURN(auto child, RebuildLeaf(spec.children[c], path + "." + std::to_string(c), inputs));
      children.push_back(std::move(child));
    }
    return std::shared_ptr<Cache>(std::make_shared<CacheList>(std::move(children)));
  }
  const std::string n = std::to_string(inputs.tokens);
  auto rows = inputs.rows.find(path);
  if (rows != inputs.rows.end()) {
    const std::vector<LeafRows>& p = rows->second;
    std::unique_ptr<Cache> built;
    if (spec.class_name == "QuantizedKVCache") {
      CacheState state({CacheState({ConcatRows(p, 0), ConcatRows(p, 1), ConcatRows(p, 2)}),
                        CacheState({ConcatRows(p, 3), ConcatRows(p, 4), ConcatRows(p, 5)})});
      KV_ASSIGN_OR_RETURN(built, CacheFromState(spec.class_name, state,
                                                MetaState::Strings({n, std::to_string(spec.group_size),
                                                                    std::to_string(spec.bits)})));
    } else {
      CacheState state({ConcatRows(p, 0), ConcatRows(p, 1)});
      MetaState meta;
      if (spec.class_name == "ChunkedKVCache") meta = MetaState::Strings({std::to_string(spec.chunk_size), "0"});
      if (spec.class_name == "RotatingKVCache") {
        meta = MetaState::Strings({std::to_string(spec.keep), std::to_string(spec.max_size), n, n});
      }
      KV_ASSIGN_OR_RETURN(built, CacheFromState(spec.class_name, state, meta));
    }
    return std::shared_ptr<Cache>(std::move(built));
  }
  auto snap = inputs.snapshots.find(path);
  if (snap != inputs.snapshots.end()) {
    const Cache& piece = *snap->second;
    if (piece.class_name() == spec.class_name) return std::shared_ptr<Cache>(piece.Copy());
    // A MambaCache comes back from the file as an ArraysCache.
    KV_ASSIGN_OR_RETURN(CacheState state, piece.State());
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> built, CacheFromState(spec.class_name, state, piece.meta_state()));
    return std::shared_ptr<Cache>(std::move(built));
  }
  return Status::InvalidArgument("layer " + path + " has neither rows nor a snapshot at " + n + " tokens");
}

}  // namespace

Result<std::vector<LeafInfo>> LeavesOf(const ModelSpec& spec) {
  std::vector<LeafInfo> out;
  for (size_t i = 0; i < spec.layers.size(); ++i) KV_RETURN_IF_ERROR(AddLeaves(spec.layers[i], std::to_string(i), out));
  return out;
}

std::vector<const Cache*> LeafCaches(const PromptCache& cache) {
  std::vector<const Cache*> out;
  for (const auto& layer : cache) AddLeafCaches(*layer, out);
  return out;
}

Result<LeafRowSource> LeafRowSource::Of(const Cache& leaf, const LeafInfo& info, int64_t tokens) {
  LeafRowSource out;
  const std::string where = "layer " + info.path + " (" + info.spec->class_name + ")";
  KV_ASSIGN_OR_RETURN(CacheState state, leaf.State());
  if (const int64_t batch = BatchOf(state); batch != 1) {
    return Status::InvalidArgument(where + ": the shared tier stores batch-1 caches, got batch " +
                                   std::to_string(batch));
  }
  if (info.kind == LeafKind::kSnapshot) return out;
  if (leaf.offset() != tokens) {
    return Status::InvalidArgument(where + " holds " + std::to_string(leaf.offset().value_or(-1)) +
                                   " tokens, the prompt has " + std::to_string(tokens));
  }
  if (const auto* r = dynamic_cast<const RotatingKVCache*>(&leaf)) {
    // Rows rebuild a window only from position 0 on, so a window that has
    // dropped rows offers none (its state goes into snapshots instead).
    const Array k = TemporalOrder(*r, r->keys_buffer()), v = TemporalOrder(*r, r->values_buffer());
    if (k.dim(2) >= tokens) {
      out.segments_.push_back(Segment{0, tokens, {k.Slice(2, 0, tokens), v.Slice(2, 0, tokens)}});
    }
  } else if (info.spec->class_name == "QuantizedKVCache") {
    LeafRows arrays;
    for (size_t part = 0; part < 2; ++part) {
      for (size_t j = 0; j < 3; ++j) arrays.push_back(state[part][j].array());
    }
    out.segments_.push_back(Segment{0, tokens, std::move(arrays)});
  } else {
    const auto* chunked = dynamic_cast<const ChunkedKVCache*>(&leaf);
    const int64_t first = chunked != nullptr ? chunked->start_position() : 0;
    const int64_t count = tokens - first;
    // A ChunkedKVCache restored from a file after it front-trimmed can have
    // a start_position past its offset (mlx-lm's lossy load): no rows then.
    if (count < 0 || count > state[0].array().dim(2) || count > state[1].array().dim(2)) return out;
    out.segments_.push_back(
        Segment{first, count, {state[0].array().Slice(2, 0, count), state[1].array().Slice(2, 0, count)}});
  }
  return out;
}

std::optional<LeafRows> LeafRowSource::Rows(int64_t a, int64_t b) const {
  for (const Segment& s : segments_) {
    if (s.first <= a && b <= s.first + s.count) {
      LeafRows out;
      for (const Array& x : s.arrays) out.push_back(x.Slice(2, a - s.first, b - s.first));
      return out;
    }
  }
  return std::nullopt;
}

Result<std::shared_ptr<Cache>> RowsPiece(const LeafInfo& info, const LeafRows& rows) {
  const std::string count = std::to_string(rows[0].dim(2));
  std::unique_ptr<Cache> piece;
  if (info.spec->class_name == "QuantizedKVCache") {
    CacheState state({CacheState({rows[0], rows[1], rows[2]}), CacheState({rows[3], rows[4], rows[5]})});
    KV_ASSIGN_OR_RETURN(piece, CacheFromState("QuantizedKVCache", state,
                                              MetaState::Strings({count, std::to_string(info.spec->group_size),
                                                                  std::to_string(info.spec->bits)})));
  } else {
    KV_ASSIGN_OR_RETURN(piece, CacheFromState("KVCache", CacheState({rows[0], rows[1]}), MetaState()));
  }
  return std::shared_ptr<Cache>(std::move(piece));
}

Result<LeafRows> RowsOfPiece(const Cache& piece, const LeafInfo& info, int64_t count) {
  const CacheSpec& s = *info.spec;
  const bool quantized = s.class_name == "QuantizedKVCache";
  const std::string_view want = quantized ? "QuantizedKVCache" : "KVCache";
  if (piece.class_name() != want) return BadPiece(info, "piece class " + std::string(piece.class_name()));
  Result<CacheState> state = piece.State();
  if (!state.ok()) return BadPiece(info, std::string(state.status().message()));
  LeafRows rows;
  if (!quantized) {
    rows = {(*state)[0].array(), (*state)[1].array()};
    KV_RETURN_IF_ERROR(CheckPieceArray(info, rows[0], s.dtype, s.k_head_dim, count));
    KV_RETURN_IF_ERROR(CheckPieceArray(info, rows[1], s.dtype, s.v_head_dim, count));
    return rows;
  }
  const auto* q = dynamic_cast<const QuantizedKVCache*>(&piece);
  if (q == nullptr || q->group_size() != s.group_size || q->bits() != s.bits) return BadPiece(info, "quantization");
  for (size_t part = 0; part < 2; ++part) {
    const int64_t dim = part == 0 ? s.k_head_dim : s.v_head_dim;
    const CacheState& t = (*state)[part];
    KV_RETURN_IF_ERROR(CheckPieceArray(info, t[0].array(), DType::kU32, dim * s.bits / 32, count));
    KV_RETURN_IF_ERROR(CheckPieceArray(info, t[1].array(), s.dtype, dim / s.group_size, count));
    KV_RETURN_IF_ERROR(CheckPieceArray(info, t[2].array(), s.dtype, dim / s.group_size, count));
    for (size_t j = 0; j < 3; ++j) rows.push_back(t[j].array());
  }
  return rows;
}

Status CheckSnapshotPiece(const Cache& piece, const LeafInfo& info, int64_t tokens) {
  Result<CacheSpec> got = SpecOfCache(piece);
  if (!got.ok()) return BadPiece(info, std::string(got.status().message()));
  if (got->class_name == "ArraysCache" && info.spec->class_name == "MambaCache") got->class_name = "MambaCache";
  const std::string diff = CacheSpecDifference(*got, *info.spec, "snapshot");
  if (!diff.empty()) return BadPiece(info, diff);
  Result<CacheState> state = piece.State();
  if (!state.ok()) return BadPiece(info, std::string(state.status().message()));
  if (piece.offset().has_value() && *piece.offset() != tokens) {
    return BadPiece(info, "snapshot at offset " + std::to_string(*piece.offset()) + ", expected " +
                              std::to_string(tokens));
  }
  if (const int64_t batch = BatchOf(*state); batch != 1) return BadPiece(info, "snapshot batch " + std::to_string(batch));
  return Status::OK();
}

Result<PromptCache> RebuildPromptCache(const ModelSpec& spec, const RebuildInputs& inputs) {
  PromptCache out;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    KV_ASSIGN_OR_RETURN(auto layer, RebuildLeaf(spec.layers[i], std::to_string(i), inputs));
    out.push_back(std::move(layer));
  }
  return out;
}

}  // namespace kvstore
