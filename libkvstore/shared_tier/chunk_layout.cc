// Cutting leaves into token rows and rebuilding caches from rows and
// snapshots (docs/format.md §8.3).
#include "libkvstore/shared_tier/chunk_layout.h"

#include "kvstore/cache_list.h"
#include "libkvstore/fingerprint/fingerprint_internal.h"

namespace kvstore {
namespace {

Result<LeafKind> KindOf(const CacheSpec& spec, const std::string& path) {
  const CacheClassInfo* info = FindCacheClass(spec.class_name);
  switch (info != nullptr ? info->chunk_rule : ChunkRule::kNotChunkable) {
    case ChunkRule::kRows:
      return LeafKind::kRows;
    case ChunkRule::kRotatingRows:
      return LeafKind::kRotating;
    case ChunkRule::kSnapshot:
      return LeafKind::kSnapshot;
    case ChunkRule::kChildren:
    case ChunkRule::kNotChunkable:
      break;
  }
  return Status::NotSupported("layer " + path + ": the shared tier cannot chunk a " + spec.class_name);
}

bool IsContainer(const CacheSpec& spec) {
  const CacheClassInfo* info = FindCacheClass(spec.class_name);
  return info != nullptr && info->chunk_rule == ChunkRule::kChildren;
}

Status AddLeaves(const CacheSpec& spec, const std::string& path, std::vector<LeafInfo>& out) {
  if (IsContainer(spec)) {
    for (size_t c = 0; c < spec.children.size(); ++c) {
      KV_RETURN_IF_ERROR(AddLeaves(spec.children[c], path + "." + std::to_string(c), out));
    }
    return Status::OK();
  }
  KV_ASSIGN_OR_RETURN(LeafKind kind, KindOf(spec, path));
  out.push_back(LeafInfo{path, &spec, kind, FindCacheClass(spec.class_name)});
  return Status::OK();
}

void AddLeafCaches(const Cache& cache, std::vector<const Cache*>& out) {
  if (!cache.children().empty()) {
    for (const auto& child : cache.children()) AddLeafCaches(*child, out);
    return;
  }
  out.push_back(&cache);
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
  if (IsContainer(spec)) {
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
    LeafRows whole;
    for (size_t i = 0; !p.empty() && i < p[0].size(); ++i) whole.push_back(ConcatRows(p, i));
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> built, CacheFromRows(spec.class_name, spec, whole));
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
  if (std::optional<TokenRows> rows = leaf.RowsByPosition()) {
    out.segments_.push_back(Segment{rows->first, rows->count, std::move(rows->arrays)});
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
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Cache> piece, CacheFromRows(info.cls->rows_piece, *info.spec, rows));
  return std::shared_ptr<Cache>(std::move(piece));
}

Result<LeafRows> RowsOfPiece(const Cache& piece, const LeafInfo& info, int64_t count) {
  const CacheSpec& s = *info.spec;
  const bool quantized = info.cls->quantized;
  if (piece.class_name() != info.cls->rows_piece) {
    return BadPiece(info, "piece class " + std::string(piece.class_name()));
  }
  Result<CacheState> state = piece.State();
  if (!state.ok()) return BadPiece(info, std::string(state.status().message()));
  LeafRows rows;
  if (!quantized) {
    rows = {(*state)[0].array(), (*state)[1].array()};
    KV_RETURN_IF_ERROR(CheckPieceArray(info, rows[0], s.dtype, s.k_head_dim, count));
    KV_RETURN_IF_ERROR(CheckPieceArray(info, rows[1], s.dtype, s.v_head_dim, count));
    return rows;
  }
  Result<CacheSpec> q = SpecOfCache(piece);
  if (!q.ok() || q->group_size != s.group_size || q->bits != s.bits) return BadPiece(info, "quantization");
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
  // A class saved under another's name (MambaCache as ArraysCache).
  if (got->class_name == info.cls->saved_as) got->class_name = info.spec->class_name;
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
