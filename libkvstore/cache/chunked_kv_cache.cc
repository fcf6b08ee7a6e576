// ChunkedKVCache: keeps the most recent chunk_size positions (spec §6).
// Faithful to mlx-lm, including the lossy save/load when start_position > 0
// (docs/compat.md).
#include "kvstore/chunked_kv_cache.h"

#include <string>

#include "libkvstore/cache/attention_state.h"
#include "libkvstore/cache/cow_buffer.h"
#include "libkvstore/cache/py_slice.h"

namespace kvstore {

struct ChunkedKVCache::Buffers {
  CowBuffer keys;
  CowBuffer values;
};

namespace {
constexpr std::string_view kName = "ChunkedKVCache";

Array Grow(const Array& buffer, int64_t prev, const Array& like, int64_t rows) {
  Array kept = prev % ChunkedKVCache::kStep != 0 ? PySlice(buffer, 2, std::nullopt, prev) : buffer;
  const Array parts[] = {kept, Array::Zeros(like.dtype(), {like.dim(0), like.dim(1), rows, like.dim(3)})};
  return Array::Concatenate(parts, 2);
}
}  // namespace

ChunkedKVCache::ChunkedKVCache(std::optional<int64_t> chunk_size) : chunk_size_(chunk_size) {}

std::unique_ptr<Cache> ChunkedKVCache::Copy() const {
  auto copy = std::make_unique<ChunkedKVCache>(chunk_size_);
  copy->start_position_ = start_position_;
  copy->offset_ = offset_;
  if (buffers_) copy->buffers_ = std::make_shared<Buffers>(*buffers_);
  return copy;
}

bool ChunkedKVCache::Empty() const { return buffers_ == nullptr; }

Status ChunkedKVCache::MaybeTrimFront() {
  if (!chunk_size_) return Status::InvalidArgument("ChunkedKVCache: chunk_size is None");
  const int64_t valid = offset_ - start_position_;
  if (buffers_ == nullptr || valid <= *chunk_size_) return Status::OK();
  const int64_t t = valid - *chunk_size_;
  start_position_ += t;
  buffers_->keys.Reset(PySlice(buffers_->keys.array(), 2, t, valid));
  buffers_->values.Reset(PySlice(buffers_->values.array(), 2, t, valid));
  return Status::OK();
}

Result<KeysValues> ChunkedKVCache::UpdateAndFetch(const Array& keys, const Array& values) {
  KV_RETURN_IF_ERROR(CheckKeysValuesUpdate(kName, keys, values));
  if (buffers_ != nullptr) {
    const Array& kb = buffers_->keys.array();
    if (kb.dim(0) != keys.dim(0) || kb.dim(1) != keys.dim(1) || kb.dim(3) != keys.dim(3) ||
        buffers_->values.array().dim(3) != values.dim(3) || kb.dtype() != keys.dtype()) {
      return Status::InvalidArgument("ChunkedKVCache: update " + keys.Describe() +
                                     " does not fit the cached " + kb.Describe());
    }
  }
  const int64_t prev = offset_ - start_position_;
  const int64_t s = keys.dim(2);
  if (prev < 0) return Status::FailedPrecondition("ChunkedKVCache: offset is before start_position");
  if (buffers_ == nullptr || prev + s > buffers_->keys.array().dim(2)) {
    const int64_t rows = (s + kStep - 1) / kStep * kStep;
    if (buffers_ == nullptr) {
      buffers_ = std::make_shared<Buffers>();
      buffers_->keys.Reset(Array::Zeros(keys.dtype(), {keys.dim(0), keys.dim(1), rows, keys.dim(3)}));
      buffers_->values.Reset(
          Array::Zeros(values.dtype(), {values.dim(0), values.dim(1), rows, values.dim(3)}));
    } else {
      buffers_->keys.Reset(Grow(buffers_->keys.array(), prev, keys, rows));
      buffers_->values.Reset(Grow(buffers_->values.array(), prev, values, rows));
    }
  }
  offset_ += s;
  const int64_t end = offset_ - start_position_;
  KV_RETURN_IF_ERROR(buffers_->keys.Write(2, prev, keys));
  KV_RETURN_IF_ERROR(buffers_->values.Write(2, prev, values));
  return KeysValues{buffers_->keys.array().Slice(2, 0, end), buffers_->values.array().Slice(2, 0, end)};
}

Result<CacheState> ChunkedKVCache::State() const {
  if (buffers_ == nullptr) return Status::FailedPrecondition("ChunkedKVCache: an empty cache has no state");
  const Array& k = buffers_->keys.array();
  if (offset_ == k.dim(2)) return CacheState({buffers_->keys.Snapshot(), buffers_->values.Snapshot()});
  // Upstream slices with the absolute offset (lossy once start_position > 0).
  const int64_t stop = std::clamp<int64_t>(offset_, 0, k.dim(2));
  return CacheState({buffers_->keys.Snapshot(2, 0, stop), buffers_->values.Snapshot(2, 0, stop)});
}

Status ChunkedKVCache::SetState(const CacheState& state) {
  KV_RETURN_IF_ERROR(CheckKeysValuesState(kName, state));
  auto buffers = std::make_shared<Buffers>();
  buffers->keys.Reset(state[0].array());
  buffers->values.Reset(state[1].array());
  buffers_ = std::move(buffers);
  offset_ = state[0].array().dim(2);
  return Status::OK();
}

MetaState ChunkedKVCache::meta_state() const {
  return MetaState::Strings(
      {chunk_size_ ? std::to_string(*chunk_size_) : std::string("None"), std::to_string(start_position_)});
}

Status ChunkedKVCache::SetMetaState(const MetaState& meta) {
  if (!meta.is_list() || meta.size() != 2) {
    return Status::InvalidArgument("ChunkedKVCache: meta_state must be [chunk_size, start_position]");
  }
  KV_ASSIGN_OR_RETURN(int64_t chunk, ParseMetaInt(kName, "chunk_size", meta[0]));
  KV_ASSIGN_OR_RETURN(int64_t start, ParseMetaInt(kName, "start_position", meta[1]));
  if (chunk < 1 || start < 0) {
    return Status::InvalidArgument("ChunkedKVCache: meta_state needs chunk_size >= 1 and start_position >= 0");
  }
  chunk_size_ = chunk;
  start_position_ = start;
  return Status::OK();
}

Result<int64_t> ChunkedKVCache::Nbytes() const {
  if (buffers_ == nullptr) return int64_t{0};
  return static_cast<int64_t>(buffers_->keys.array().nbytes() + buffers_->values.array().nbytes());
}

Result<int64_t> ChunkedKVCache::Trim(int64_t n) {
  if (n < 0) return Status::InvalidArgument("ChunkedKVCache: trim by a negative count");
  const int64_t trimmed = std::max<int64_t>(0, std::min(offset_ - start_position_, n));
  offset_ -= trimmed;
  return trimmed;
}

}  // namespace kvstore
