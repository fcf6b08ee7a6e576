// TokenBuffer: mlx-lm's growing int32 token buffer (cache.py TokenBuffer).
//
// The buffer grows like KVCache's: whenever an append would not fit, it is
// extended with zeros to the next multiple of kStep (256) tokens, so
// appending n tokens costs O(n) except at growth points. The constructor's
// buffer is exactly as long as its tokens (not rounded up), as upstream.
//
//   state()  = the whole buffer, spare zeros included   [capacity]
//   tokens() = the filled part                           [size]
//
// Threads: not thread-safe. One thread at a time may call a mutating member;
// const members may run concurrently with each other only.
#ifndef KVSTORE_TOKEN_BUFFER_H_
#define KVSTORE_TOKEN_BUFFER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/status.h"

namespace kvstore {

class TokenBuffer {
 public:
  static constexpr int64_t kStep = 256;

  // A buffer holding exactly `tokens` (capacity == size == tokens.size()).
  explicit TokenBuffer(std::span<const int32_t> tokens = {});

  // Appends `tokens` and returns the filled part (all tokens so far).
  // Growth rule: with end = size() + tokens.size(), when
  // round_up(end, kStep) > capacity() the buffer is zero-extended to that
  // length. Note that this applies to an empty append as well: a buffer built
  // from 3 tokens grows to 256 on UpdateAndFetch({}).
  // The returned span (like those of state() and tokens()) stays valid until
  // the next UpdateAndFetch.
  std::span<const int32_t> UpdateAndFetch(std::span<const int32_t> tokens);

  // The same for a 1-D array of any integer dtype (BOOL included). Elements
  // are converted to int32 as C++ static_cast does (a U32 token >= 2^31
  // wraps), like MLX's assignment into an int32 array.
  // InvalidArgument when `tokens` is undefined, not 1-D, or not integral;
  // the buffer is unchanged then.
  Result<std::span<const int32_t>> UpdateAndFetch(const Array& tokens);

  // The whole buffer, spare capacity (zeros) included.
  std::span<const int32_t> state() const { return buffer_; }
  // The filled part: the first size() elements of state().
  std::span<const int32_t> tokens() const { return std::span<const int32_t>(buffer_).first(size_); }
  int64_t size() const { return static_cast<int64_t>(size_); }
  int64_t capacity() const { return static_cast<int64_t>(buffer_.size()); }

 private:
  std::vector<int32_t> buffer_;  // buffer_.size() is the capacity
  size_t size_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_TOKEN_BUFFER_H_
