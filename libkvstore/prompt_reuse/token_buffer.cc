#include "kvstore/token_buffer.h"

#include <algorithm>
#include <string>

namespace kvstore {

TokenBuffer::TokenBuffer(std::span<const int32_t> tokens)
    : buffer_(tokens.begin(), tokens.end()), size_(tokens.size()) {}

std::span<const int32_t> TokenBuffer::UpdateAndFetch(std::span<const int32_t> tokens) {
  const size_t end = size_ + tokens.size();
  const size_t step = static_cast<size_t>(kStep);
  const size_t rounded = (end + step - 1) / step * step;
  if (rounded > buffer_.size()) buffer_.resize(rounded, 0);
  std::copy(tokens.begin(), tokens.end(), buffer_.begin() + static_cast<ptrdiff_t>(size_));
  size_ = end;
  return this->tokens();
}

Result<std::span<const int32_t>> TokenBuffer::UpdateAndFetch(const Array& tokens) {
  if (!tokens.defined()) return Status::InvalidArgument("TokenBuffer: tokens array is undefined");
  if (tokens.ndim() != 1) {
    return Status::InvalidArgument("TokenBuffer: tokens must be 1-D, got shape " +
                                   ShapeToString(tokens.shape()));
  }
  if (!IsIntegral(tokens.dtype())) {
    return Status::InvalidArgument("TokenBuffer: tokens must have an integer dtype, got " +
                                   std::string(DTypeName(tokens.dtype())));
  }
  KV_ASSIGN_OR_RETURN(Array as_i32, tokens.AsType(DType::kI32));
  const std::vector<int32_t> values = as_i32.ToVector<int32_t>();
  return UpdateAndFetch(std::span<const int32_t>(values));
}

}  // namespace kvstore
