#include "libkvstore/shared_tier/chunk_codec.h"

#include <charconv>
#include <set>

#include "kvstore/prompt_cache_bytes.h"
#include "libkvstore/format/bytes_io.h"
#include "libkvstore/shared_tier/chunk_piece_shape.h"
#include "libkvstore/shared_tier/sealed_value.h"
#include "libkvstore/util/token_text.h"

namespace kvstore {
namespace {

constexpr std::string_view kChunkFormatKey = "kvstore_chunk_format";
constexpr std::string_view kKindKey = "kvstore_chunk_kind";
constexpr std::string_view kNamespaceKey = "kvstore_chunk_namespace";
constexpr std::string_view kIndexKey = "kvstore_chunk_index";
constexpr std::string_view kChunkTokensKey = "kvstore_chunk_tokens";
constexpr std::string_view kTokenIdsKey = "kvstore_chunk_token_ids";
constexpr std::string_view kChainKey = "kvstore_chunk_chain";
constexpr std::string_view kParentKey = "kvstore_chunk_parent";
constexpr std::string_view kLayersKey = "kvstore_chunk_layers";
constexpr std::string_view kWriterKey = "kvstore_chunk_writer";

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? "," : "") + parts[i];
  return out;
}

std::vector<std::string> Split(std::string_view s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  while (true) {
    const size_t comma = s.find(',');
    out.emplace_back(s.substr(0, comma));
    if (comma == std::string_view::npos) return out;
    s.remove_prefix(comma + 1);
  }
}

std::optional<int64_t> ParseCount(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

Status Refuse(ChunkFault kind, ChunkFault* fault, const std::string& key, std::string_view what) {
  if (fault != nullptr) *fault = kind;
  return Status::Corruption("shared tier: " + key + ": " + std::string(what));
}

// The header fields against the request (kind, namespace, position, tokens, chain).
std::string HeaderMismatch(const ChunkHeader& h, const ChunkRequest& r) {
  if (h.kind != r.kind) return "holds another kind of value";
  if (h.ns_digest != r.ns->digest.ToHex()) return "holds namespace " + h.ns_digest.substr(0, 32);
  if (h.chunk_tokens != r.ns->chunk_tokens) return "holds chunks of " + std::to_string(h.chunk_tokens) + " tokens";
  if (h.index != r.index) return "holds chain position " + std::to_string(h.index);
  if (!std::equal(h.tokens.begin(), h.tokens.end(), r.tokens.begin(), r.tokens.end())) return "holds other tokens";
  if (h.chain != r.chain->ToHex()) return "holds chain hash " + h.chain.substr(0, 16);
  if (h.parent != (r.parent != nullptr ? r.parent->ToHex() : std::string())) return "holds another parent";
  return "";
}

// Which leaves a value of this kind must, may and must not carry.
std::string LayerListProblem(const ChunkHeader& h, const ChunkRequest& r) {
  std::set<std::string> seen;
  for (const std::string& path : h.layers) {
    if (!seen.insert(path).second) return "lists layer " + path + " twice";
  }
  for (const LeafInfo& leaf : *r.leaves) {
    const bool has = seen.erase(leaf.path) > 0;
    const bool allowed = r.kind == ChunkKind::kRows ? leaf.kind != LeafKind::kSnapshot : leaf.kind != LeafKind::kRows;
    // A rows value needs every rows leaf (rotating rows are optional); a
    // snapshot value every leaf that is not a rows leaf.
    const bool required = r.kind == ChunkKind::kRows ? leaf.kind == LeafKind::kRows : allowed;
    if (has && !allowed) return "carries layer " + leaf.path + ", which this kind of value cannot hold";
    if (!has && required) return "lacks layer " + leaf.path;
    if (has && r.kind == ChunkKind::kRows && leaf.kind == LeafKind::kRotating &&
        (h.index + 1) * h.chunk_tokens > leaf.spec->max_size) {
      return "carries rows of rotating layer " + leaf.path + " beyond its window";
    }
  }
  if (!seen.empty()) return "carries unknown layer " + *seen.begin();
  return "";
}

// A header larger than any chunk's is refused before it is decompressed or
// parsed: token ids (at most 12 characters each), and per layer its class,
// meta state, tensor entries and digests.
ParseLimits ChunkParseLimits(const ChunkRequest& r) {
  ParseLimits limits;
  const uint64_t tokens = static_cast<uint64_t>(std::max<int64_t>(0, r.ns->chunk_tokens));
  limits.max_header_size = std::min<uint64_t>(limits.max_header_size,
                                              (uint64_t{64} << 10) + 16 * tokens + (uint64_t{4} << 10) * r.leaves->size());
  return limits;
}

const LeafInfo& LeafAt(const ChunkRequest& r, const std::string& path) {
  return *std::find_if(r.leaves->begin(), r.leaves->end(), [&](const LeafInfo& l) { return l.path == path; });
}

// Every layer's class, dtypes and shapes from the header against the piece
// its leaf makes, and the declared data size against the most a chunk
// holds: before any tensor byte is decompressed or hashed.
// REQUIRES: LayerListProblem found nothing and the counts agree.
std::string PieceShapesProblem(const PromptCacheInfo& info, const ChunkHeader& h, const ChunkRequest& r) {
  const int64_t end = (r.index + 1) * r.ns->chunk_tokens;
  uint64_t most = 0;
  for (size_t j = 0; j < h.layers.size(); ++j) {
    const PieceShape want = ExpectedPiece(LeafAt(r, h.layers[j]), r.kind, r.ns->chunk_tokens, end);
    if (std::string why = PieceShapeProblem(info.layers[j], want); !why.empty()) {
      return "layer " + h.layers[j] + ": " + why;
    }
    most += MaxPieceBytes(want);
  }
  if (info.tensor_bytes > most) {
    return "declares " + std::to_string(info.tensor_bytes) + " tensor bytes, more than the " + std::to_string(most) +
           " its pieces can hold";
  }
  return "";
}

}  // namespace

Metadata ChunkHeaderMetadata(const ChunkHeader& h) {
  return {{std::string(kChunkFormatKey), std::string(kChunkFormat)},
          {std::string(kKindKey), h.kind == ChunkKind::kRows ? "rows" : "snapshot"},
          {std::string(kNamespaceKey), h.ns_digest},
          {std::string(kIndexKey), std::to_string(h.index)},
          {std::string(kChunkTokensKey), std::to_string(h.chunk_tokens)},
          {std::string(kTokenIdsKey), TokensText(h.tokens)},
          {std::string(kChainKey), h.chain},
          {std::string(kParentKey), h.parent},
          {std::string(kLayersKey), Join(h.layers)},
          {std::string(kWriterKey), h.writer}};
}

Result<ChunkHeader> ChunkHeaderFromMetadata(const Metadata& metadata) {
  std::map<std::string_view, std::string_view> m;
  for (const auto& [k, v] : metadata) m[k] = v;
  auto get = [&](std::string_view key) -> Result<std::string_view> {
    auto it = m.find(key);
    if (it == m.end()) return Status::Corruption("not a shared-tier chunk: no " + std::string(key));
    return it->second;
  };
  KV_ASSIGN_OR_RETURN(std::string_view format, get(kChunkFormatKey));
  if (format != kChunkFormat) return Status::Corruption("unknown chunk format '" + std::string(format) + "'");
  ChunkHeader h;
  KV_ASSIGN_OR_RETURN(std::string_view kind, get(kKindKey));
  if (kind != "rows" && kind != "snapshot") return Status::Corruption("unknown chunk kind '" + std::string(kind) + "'");
  h.kind = kind == "rows" ? ChunkKind::kRows : ChunkKind::kSnapshot;
  KV_ASSIGN_OR_RETURN(std::string_view ns, get(kNamespaceKey));
  KV_ASSIGN_OR_RETURN(std::string_view index, get(kIndexKey));
  KV_ASSIGN_OR_RETURN(std::string_view chunk_tokens, get(kChunkTokensKey));
  KV_ASSIGN_OR_RETURN(std::string_view ids, get(kTokenIdsKey));
  KV_ASSIGN_OR_RETURN(std::string_view chain, get(kChainKey));
  KV_ASSIGN_OR_RETURN(std::string_view parent, get(kParentKey));
  KV_ASSIGN_OR_RETURN(std::string_view layers, get(kLayersKey));
  KV_ASSIGN_OR_RETURN(std::string_view writer, get(kWriterKey));
  std::optional<int64_t> i = ParseCount(index), c = ParseCount(chunk_tokens);
  std::optional<std::vector<int32_t>> tokens = ParseTokens(ids);
  if (!i || !c || !tokens) return Status::Corruption("malformed chunk position or tokens");
  h.ns_digest = std::string(ns);
  h.index = *i;
  h.chunk_tokens = *c;
  h.tokens = std::move(*tokens);
  h.chain = std::string(chain);
  h.parent = std::string(parent);
  h.layers = Split(layers);
  h.writer = std::string(writer);
  return h;
}

Result<std::string> EncodeChunk(const std::string& key, const ChunkHeader& header,
                                const std::vector<std::shared_ptr<const Cache>>& pieces,
                                const ChunkEncodeOptions& options) {
  const bool sealed = options.ns != nullptr && options.ns->sealed();
  SavePromptCacheOptions save;
  save.layout = PromptCacheLayout::kMlxLm;
  // Inside the envelope the GCM tag authenticates every byte: no digests.
  save.integrity = !sealed;
  save.digest = options.digest;
  save.compression_level = options.compression_level;
  save.threads = 1;  // chunks are small; the caller runs many at once
  size_t tensor_bytes = 0;
  for (const auto& piece : pieces) {
    if (Result<CacheState> state = piece->State(); state.ok()) tensor_bytes += state->nbytes();
  }
  constexpr size_t kHeaderRoom = size_t{16} << 10;
  // The header room leaves space for the envelope's trailer: sealed in place.
  KV_ASSIGN_OR_RETURN(
      std::string value,
      SaveLayersToString(
          pieces.size(), [&](size_t i) -> Result<std::shared_ptr<const Cache>> { return pieces[i]; },
          ChunkHeaderMetadata(header), save, WriterHooks{}, tensor_bytes + kHeaderRoom));
  if (sealed) {
    KV_RETURN_IF_ERROR(SealInPlace(value, options.ns->value_key, key, DigestBytes(options.ns->digest)));
  }
  return value;
}

Status OpenChunkValue(std::string& value, const std::string& key, const ChunkNamespace& ns) {
  if (!ns.sealed()) return Status::OK();
  SealedTrailer trailer;
  return OpenInPlace(value, ns.value_key, key, DigestBytes(ns.digest), trailer);
}

Result<DecodedChunk> DecodeChunk(std::shared_ptr<std::string> value, const ChunkRequest& r, ChunkFault* fault) {
  const bool sealed = r.ns->sealed();
  SealedTrailer trailer;
  if (sealed) {
    Status opened = OpenInPlace(*value, r.ns->value_key, r.key, DigestBytes(r.ns->digest), trailer);
    if (!opened.ok()) return Refuse(ChunkFault::kForged, fault, r.key, opened.message());
  }
  // A value refused after it was opened is sealed again, so that the
  // caller's conditional delete compares the bytes the store holds.
  auto refuse = [&](ChunkFault kind, std::string_view what) {
    if (sealed) UndoOpen(*value, r.ns->value_key, trailer);
    return Refuse(kind, fault, r.key, what);
  };
  PromptCacheReader::Options open;
  open.limits = ChunkParseLimits(r);
  open.threads = 1;
  Result<std::unique_ptr<PromptCacheReader>> opened = OpenPromptCacheReader(value, open);
  if (!opened.ok()) return refuse(ChunkFault::kCorrupt, opened.status().message());
  const PromptCacheReader& reader = **opened;
  const PromptCacheInfo& info = reader.info();
  if (!info.unsupported.empty()) return refuse(ChunkFault::kCorrupt, info.unsupported);
  Result<ChunkHeader> header = ChunkHeaderFromMetadata(info.user_metadata);
  if (!header.ok()) return refuse(ChunkFault::kCorrupt, header.status().message());
  if (std::string why = HeaderMismatch(*header, r); !why.empty()) {
    return refuse(ChunkFault::kMismatched, why);
  }
  if (std::string why = LayerListProblem(*header, r); !why.empty() || header->layers.size() != reader.num_layers()) {
    return refuse(ChunkFault::kCorrupt, why.empty() ? "layer count disagrees with its list" : why);
  }
  if (std::string why = PieceShapesProblem(info, *header, r); !why.empty()) {
    return refuse(ChunkFault::kCorrupt, why);
  }
  if (!sealed) {  // a sealed value's tag has covered every byte
    Result<VerifyReport> verified = reader.Verify(1);
    if (!verified.ok()) return refuse(ChunkFault::kCorrupt, verified.status().message());
    if (!verified->has_digests) return refuse(ChunkFault::kCorrupt, "carries no digests");
    if (!verified->ok()) return refuse(ChunkFault::kCorrupt, "digests do not match the bytes");
  }
  DecodedChunk out;
  const int64_t end = (r.index + 1) * r.ns->chunk_tokens;
  for (size_t j = 0; j < reader.num_layers(); ++j) {
    const std::string& path = header->layers[j];
    const LeafInfo& leaf = LeafAt(r, path);
    Result<std::shared_ptr<Cache>> piece = reader.ReadLayer(j);
    if (!piece.ok()) return refuse(ChunkFault::kCorrupt, piece.status().message());
    if (r.kind == ChunkKind::kRows) {
      Result<LeafRows> rows = RowsOfPiece(**piece, leaf, r.ns->chunk_tokens);
      if (!rows.ok()) return refuse(ChunkFault::kCorrupt, rows.status().message());
      out.rows[path] = std::move(rows).value();
    } else {
      Status ok = CheckSnapshotPiece(**piece, leaf, end);
      if (!ok.ok()) return refuse(ChunkFault::kCorrupt, ok.message());
      out.snapshots[path] = std::move(piece).value();
    }
  }
  out.header = std::move(header).value();
  return out;
}

}  // namespace kvstore
