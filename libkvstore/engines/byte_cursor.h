// ByteCursor: bounds-checked little-endian reads over hostile bytes, shared
// by the ggsq and GGUF parsers. Every read checks the remaining length first
// and fails with Corruption naming the field and the offset.
#ifndef KVSTORE_LIBKVSTORE_ENGINES_BYTE_CURSOR_H_
#define KVSTORE_LIBKVSTORE_ENGINES_BYTE_CURSOR_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "kvstore/status.h"

namespace kvstore::engines {

static_assert(std::endian::native == std::endian::little, "the file formats are little-endian");

class ByteCursor {
 public:
  // `what` prefixes every error message, e.g. "llama.cpp state".
  ByteCursor(std::span<const std::byte> bytes, std::string_view what) : bytes_(bytes), what_(what) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  std::span<const std::byte> bytes() const { return bytes_; }

  template <typename T>
  Result<T> Read(std::string_view field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return Truncated(field, sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // Skips `n` bytes, or fails naming `field` when fewer remain.
  Status Skip(uint64_t n, std::string_view field) {
    if (remaining() < n) return Truncated(field, n);
    pos_ += n;
    return Status::OK();
  }

  // The next `n` bytes as a span, or an error naming `field`.
  Result<std::span<const std::byte>> Take(uint64_t n, std::string_view field) {
    if (remaining() < n) return Truncated(field, n);
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

  // "<what>: <message>" as Corruption.
  Status Corrupt(std::string_view message) const {
    return Status::Corruption(std::string(what_) + ": " + std::string(message));
  }
  Status Unsupported(std::string_view message) const {
    return Status::NotSupported(std::string(what_) + ": " + std::string(message));
  }

 private:
  Status Truncated(std::string_view field, uint64_t need) const {
    return Corrupt(std::string(field) + " at offset " + std::to_string(pos_) + " needs " +
                   std::to_string(need) + " bytes, " + std::to_string(remaining()) + " remain (truncated file?)");
  }

  std::span<const std::byte> bytes_;
  std::string_view what_;
  uint64_t pos_ = 0;
};

// a * b, or false when it overflows 64 bits.
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace kvstore::engines

#endif  // KVSTORE_LIBKVSTORE_ENGINES_BYTE_CURSOR_H_
