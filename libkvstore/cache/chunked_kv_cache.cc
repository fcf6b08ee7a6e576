// ChunkedKVCache: keeps the most recent chunk_size positions. Faithful to
// mlx-lm, including the lossy save/load when start_position > 0
// (docs/compat.md).
#include "kvstore/chunked_kv_cache.h"

#include <string>

#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/kv_buffers.h"
#include "libkvstore/cache/py_slice.h"

namespace kvstore {

namespace {
constexpr std::string_view kChunkedName = "ChunkedKVCache";
}  // namespace

ChunkedKVCache::ChunkedKVCache(std::optional<int64_t> chunk_size)
    : chunk_size_(chunk_size), buffers_(std::make_shared<KVBuffers>()) {}

std::unique_ptr<Cache> ChunkedKVCache::Copy() const {
  auto copy = std::make_unique<ChunkedKVCache>(*this);
  copy->buffers_ = std::make_shared<KVBuffers>(*buffers_);  // its own, copy-on-write
  return copy;
}

bool ChunkedKVCache::Empty() const { return buffers_->empty(); }

Status ChunkedKVCache::MaybeTrimFront() {
  if (buffers_->empty()) return Status::OK();
  if (!chunk_size_) return Status::InvalidArgument("ChunkedKVCache: chunk_size is None");
  const int64_t valid = offset_ - start_position_;
  if (valid <= *chunk_size_) return Status::OK();
  const int64_t t = valid - *chunk_size_;
  start_position_ += t;
  buffers_->Map([&](const Array& a) { return PySlice(a, 2, t, valid); });
  return Status::OK();
}

Result<KeysValues> ChunkedKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(buffers_->WriteGrowing(kChunkedName, offset_ - start_position_, keys, values));
  offset_ += keys.dim(2);
  return buffers_->Fetch(offset_ - start_position_);
}

// Upstream slices with the absolute offset (lossy once start_position > 0).
Result<CacheState> ChunkedKVCache::State() const { return buffers_->State(kChunkedName, offset_); }

Status ChunkedKVCache::SetState(const CacheState& state) {
  KV_RETURN_IF_ERROR(buffers_->Restore(kChunkedName, state));
  offset_ = buffers_->rows();
  return Status::OK();
}

MetaState ChunkedKVCache::meta_state() const {
  return MetaState::Strings({chunk_size_ ? std::to_string(*chunk_size_) : std::string("None"),
                             std::to_string(start_position_)});
}

Status ChunkedKVCache::SetMetaState(const MetaState& meta) {
  KV_ASSIGN_OR_RETURN(std::vector<int64_t> v,
                      ParseMetaInts(kChunkedName, meta, {"chunk_size", "start_position"}));
  const int64_t chunk = v[0], start = v[1];
  if (chunk < 1 || start < 0) {
    return Status::InvalidArgument(
        "ChunkedKVCache: meta_state needs chunk_size >= 1 and start_position >= 0");
  }
  chunk_size_ = chunk;
  start_position_ = start;
  return Status::OK();
}

// A front-trimmed cache restored from an older file has offset = rows <
// start_position (upstream's restore, docs/compat.md); 0.32 stores the
// offset itself, so it gets the one the rows end at.
Result<CacheState> ChunkedKVCache::FullState() const {
  const int64_t offset = offset_ < start_position_ ? start_position_ + buffers_->rows() : offset_;
  return CacheState({buffers_->FullKeys(), buffers_->FullValues(), CacheState::Int(offset),
                     chunk_size_ ? CacheState::Int(*chunk_size_) : CacheState::None(),
                     CacheState::Int(start_position_)});
}

// The buffer holds positions [start_position, offset) from its first row.
Status ChunkedKVCache::SetFullState(const CacheState& state) {
  KV_RETURN_IF_ERROR(
      CheckFullState(kChunkedName, state, {"keys", "values", "offset", "chunk_size", "start_position"}));
  KV_ASSIGN_OR_RETURN(int64_t offset, FullStateInt(kChunkedName, "offset", state[2]));
  std::optional<int64_t> chunk;
  if (!state[3].is_none()) {
    KV_ASSIGN_OR_RETURN(chunk, FullStateInt(kChunkedName, "chunk_size", state[3]));
  }
  KV_ASSIGN_OR_RETURN(int64_t start, FullStateInt(kChunkedName, "start_position", state[4]));
  auto next = std::make_shared<KVBuffers>();
  KV_RETURN_IF_ERROR(next->RestoreFull(kChunkedName, state[0], state[1]));
  if ((chunk && *chunk < 1) || start < 0 || offset < start || offset - start > next->rows()) {
    return Status::InvalidArgument("ChunkedKVCache: mlx-lm 0.32 state needs chunk_size >= 1 or None and 0 <= "
                                   "start_position <= offset <= start_position + buffered rows, got offset " +
                                   std::to_string(offset) + ", start_position " + std::to_string(start) + ", " +
                                   std::to_string(next->rows()) + " rows");
  }
  buffers_ = std::move(next);
  offset_ = offset;
  chunk_size_ = chunk;
  start_position_ = start;
  return Status::OK();
}

Result<int64_t> ChunkedKVCache::Nbytes() const { return buffers_->nbytes(); }

Result<int64_t> ChunkedKVCache::Trim(int64_t n) {
  KV_ASSIGN_OR_RETURN(int64_t trimmed, TrimCount(kChunkedName, n, offset_ - start_position_));
  offset_ -= trimmed;
  return trimmed;
}

Status ChunkedKVCache::DescribeSpec(CacheSpec& spec) const {
  KV_RETURN_IF_ERROR(Cache::DescribeSpec(spec));
  if (!chunk_size()) return UnknownShapes(*this, "has chunk size None");
  spec.chunk_size = *chunk_size();
  return Status::OK();
}

// A ChunkedKVCache restored from a file after it front-trimmed can have a
// start_position past its offset (mlx-lm's lossy load): no rows then.
std::optional<TokenRows> ChunkedKVCache::RowsByPosition() const {
  Result<CacheState> state = State();
  if (!state.ok()) return std::nullopt;
  return LeadingRows(*state, start_position(), offset_ - start_position());
}

Status ChunkedKVCache::RestoreRows(const CacheSpec& spec, std::span<const Array> rows) {
  if (rows.size() != 2) return Status::InvalidArgument("ChunkedKVCache: rows are keys and values");
  KV_RETURN_IF_ERROR(SetState(CacheState({rows[0], rows[1]})));
  return SetMetaState(MetaState::Strings({std::to_string(spec.chunk_size), "0"}));
}

}  // namespace kvstore
