// ChunkedKVCache: mlx-lm's cache for chunked local attention (llama4), which
// keeps the most recent chunk_size positions once the model trims the front.
#ifndef KVSTORE_CHUNKED_KV_CACHE_H_
#define KVSTORE_CHUNKED_KV_CACHE_H_

#include <memory>
#include <optional>

#include "kvstore/cache.h"

namespace kvstore {

// Updates grow and write like KVCache's at position offset - start_position.
// state = buffers sliced to the absolute offset (upstream quirk, see
// docs/compat.md); meta_state = [chunk_size, start_position].
class ChunkedKVCache : public Cache {
 public:
  static constexpr int64_t kStep = 256;

  // chunk_size nullopt = Python None (mlx-swift-lm writes "None").
  explicit ChunkedKVCache(std::optional<int64_t> chunk_size);
  std::string_view class_name() const override { return "ChunkedKVCache"; }
  std::unique_ptr<Cache> Copy() const override;

  Result<KeysValues> UpdateAndFetch(const Array& keys, const Array& values) override;
  // Drops positions older than the last chunk_size (called by the model
  // before each forward pass, not by UpdateAndFetch). InvalidArgument when
  // chunk_size is None and the cache is not empty.
  Status MaybeTrimFront();

  Result<CacheState> State() const override;
  Status SetState(const CacheState& state) override;
  MetaState meta_state() const override;
  Status SetMetaState(const MetaState& meta) override;
  // [keys, values, offset, chunk_size (None allowed), start_position]: the
  // whole buffers; None, None when empty.
  Result<CacheState> FullState() const override;
  Status SetFullState(const CacheState& state) override;

  std::optional<int64_t> offset() const override { return offset_; }
  bool Empty() const override;
  Result<int64_t> Nbytes() const override;
  bool IsTrimmable() const override { return true; }
  Result<int64_t> Trim(int64_t n) override;
  Status DescribeSpec(CacheSpec& spec) const override;
  std::optional<TokenRows> RowsByPosition() const override;
  Status RestoreRows(const CacheSpec& spec, std::span<const Array> rows) override;

  std::optional<int64_t> chunk_size() const { return chunk_size_; }
  int64_t start_position() const { return start_position_; }

 private:
  std::optional<int64_t> chunk_size_;
  int64_t start_position_ = 0;
  int64_t offset_ = 0;
  std::shared_ptr<KVBuffers> buffers_;  // never null
};

}  // namespace kvstore

#endif  // KVSTORE_CHUNKED_KV_CACHE_H_
