// Array: a CPU tensor (dtype, shape, strides) over shared storage.
//
// Storage is a block of bytes that many arrays may view. It is either a
// writable heap buffer (64-byte aligned) or read-only bytes owned by someone
// else, typically a read-only mmap of a file. An Array holds a shared
// reference to its Storage, so a view keeps the heap buffer or the file
// mapping alive for as long as the view exists: a view never dangles.
//
// Copying an Array is O(1) and shares storage (like an MLX array handle).
// Operations documented as "view" share storage with their input; the others
// return arrays over fresh storage. What a view may and may not outlive:
//   * it may outlive the Array it was taken from, the cache that returned it
//     and the file object that mapped it (the storage is reference counted);
//   * its *contents* change if someone writes into the shared storage with
//     CopyFrom. Only code that owns a writable buffer does that (a cache
//     writing its own buffer); such owners document when their views change
//     (see cache.h) and clone-on-write when they promised a snapshot.
//
// Strides are in elements, row-major (C order) for freshly created arrays.
// Shapes use int64_t; every dimension is >= 0.
//
// Element access: data() may be unaligned only for arrays built with
// Array::FromStorage over unaligned bytes; everything else in libkvstore
// produces arrays whose elements are aligned to their size (is_aligned()).
//
// Thread safety: const members may be called from many threads at once.
// CopyFrom writes shared bytes: the caller must ensure no other thread reads
// the overlapping elements at the same time.
//
// Allocation failure is treated like std::vector's: operator new throws
// std::bad_alloc. Sizes read from files are capped by the parsers before any
// array is allocated, so hostile input cannot trigger this.
#ifndef KVSTORE_ARRAY_H_
#define KVSTORE_ARRAY_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstore/dtype.h"
#include "kvstore/status.h"

namespace kvstore {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;  // in elements

// "[1, 8, 256, 128]"
std::string ShapeToString(const Shape& shape);
// Product of dims; nullopt-like -1 when it overflows int64 or a dim is negative.
int64_t ShapeNumel(const Shape& shape);

// A block of bytes shared by arrays. Immutable after construction except
// through mutable_data() on writable storage.
class Storage {
 public:
  // Zero-filled, 64-byte aligned, writable.
  static std::shared_ptr<Storage> Allocate(size_t nbytes);
  // Like Allocate but the bytes are left uninitialised (for callers that
  // overwrite every byte).
  static std::shared_ptr<Storage> AllocateUninitialized(size_t nbytes);
  // Read-only bytes owned by `owner` (e.g. an mmap region). The bytes must
  // stay valid and unchanged while `owner` is alive.
  static std::shared_ptr<Storage> WrapReadOnly(const std::byte* data, size_t nbytes,
                                               std::shared_ptr<const void> owner);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool writable() const { return writable_; }
  // REQUIRES: writable().
  std::byte* mutable_data();

 private:
  Storage(std::byte* data, size_t size, bool writable, std::shared_ptr<const void> owner);

  std::byte* data_;
  size_t size_;
  bool writable_;
  std::shared_ptr<const void> owner_;  // null for heap storage we free ourselves
};

class Array {
 public:
  // An undefined array (defined() == false). Only assignment, defined() and
  // destruction are meaningful on it.
  Array() = default;

  // ---- Construction (fresh storage) ----
  static Array Zeros(DType dtype, const Shape& shape);
  // REQUIRES: bytes.size() == numel * DTypeSize(dtype). Copies the bytes.
  static Array FromBytes(DType dtype, const Shape& shape, std::span<const std::byte> bytes);
  // REQUIRES: sizeof(T) == DTypeSize(dtype) and values.size() == numel.
  template <typename T>
  static Array FromValues(DType dtype, const Shape& shape, std::span<const T> values) {
    return FromBytes(dtype, shape, std::as_bytes(values));
  }
  // A 1-D I32 array, e.g. offsets or left padding.
  static Array FromInt32s(std::span<const int32_t> values);
  static Array FromInt32s(std::initializer_list<int32_t> values) {
    return FromInt32s(std::span<const int32_t>(values.begin(), values.size()));
  }

  // A contiguous row-major view of existing storage (zero-copy), e.g. a tensor
  // inside a mapped file. REQUIRES: byte_offset + numel*itemsize <= size.
  static Array FromStorage(DType dtype, const Shape& shape, std::shared_ptr<Storage> storage,
                           size_t byte_offset);

  // ---- Properties ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Dimension `axis`; negative axes count from the end. REQUIRES: valid axis.
  int64_t dim(int axis) const;
  int64_t numel() const;
  size_t itemsize() const { return DTypeSize(dtype_); }
  // Logical bytes: numel * itemsize (not the storage size).
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  // True when the elements are dense and in row-major order.
  bool is_contiguous() const;
  // True when data() is a multiple of itemsize.
  bool is_aligned() const;

  // Pointer to the first element. For a non-contiguous array the elements
  // are found through strides().
  const std::byte* data() const { return storage_->data() + byte_offset_; }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data());
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return byte_offset_; }
  // True when no other Array, view or owner shares this storage; a cache uses
  // it to decide whether an in-place write needs a copy first.
  bool storage_unique() const { return storage_.use_count() == 1; }
  bool SharesStorageWith(const Array& other) const { return storage_ == other.storage_; }

  // ---- Views (share storage) ----
  // Elements [start, stop) of `axis` (negative axis counts from the end).
  // REQUIRES: 0 <= start <= stop <= dim(axis).
  Array Slice(int axis, int64_t start, int64_t stop) const;
  // Same elements, new shape. A view when contiguous, else a contiguous copy.
  // REQUIRES: same numel.
  Array Reshape(const Shape& shape) const;

  // ---- New storage ----
  // *this when already contiguous and aligned, else a dense copy.
  Array Contiguous() const;
  // Always a dense copy into fresh writable storage.
  Array Clone() const;
  // Element type conversion. F16/BF16/F32/F64 convert with IEEE
  // round-to-nearest-even (NaN stays NaN, overflow gives Inf); integers
  // convert as C++ static_cast (floats truncate toward zero). Returns *this
  // when dtype is unchanged. Error (NotSupported) for storage-only dtypes.
  Result<Array> AsType(DType dtype) const;
  // Concatenation along `axis`. REQUIRES: arrays non-empty, all defined,
  // same dtype and ndim, equal dims except `axis`.
  static Array Concatenate(std::span<const Array> arrays, int axis);
  // Elements at `indices` along `axis` (like x[..., indices, ...]).
  // REQUIRES: every index in [0, dim(axis)).
  Array Take(int axis, std::span<const int64_t> indices) const;
  // Circular shift along `axis` (numpy/mx.roll): out[j] = in[(j - shift) mod n].
  Array Roll(int axis, int64_t shift) const;

  // ---- In-place write ----
  // Writes src's elements into the elements this array views. Both arrays
  // are in logical (row-major) order; strides may differ.
  // Errors: InvalidArgument on dtype/shape mismatch; FailedPrecondition when
  // the storage is read-only. Overlap between src and *this is allowed only
  // when they are the same elements.
  Status CopyFrom(const Array& src);

  // ---- Reading elements ----
  // Calls fn with consecutive byte runs that together are the array's
  // elements in row-major order (one run when contiguous).
  void ForEachRun(const std::function<void(std::span<const std::byte>)>& fn) const;
  // The elements in row-major order as a dense byte vector.
  std::vector<std::byte> ToBytes() const;
  // REQUIRES: sizeof(T) == itemsize().
  template <typename T>
  std::vector<T> ToVector() const {
    std::vector<std::byte> bytes = ToBytes();
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  // One element; `index` has ndim() entries. REQUIRES: sizeof(T) == itemsize().
  template <typename T>
  T At(std::initializer_list<int64_t> index) const {
    T out;
    std::memcpy(&out, ElementPtr(std::span<const int64_t>(index.begin(), index.size())),
                sizeof(T));
    return out;
  }
  const std::byte* ElementPtr(std::span<const int64_t> index) const;

  // Same dtype, shape and elements (strides may differ).
  bool ContentEquals(const Array& other) const;

  // "F16[1, 8, 37, 64]"
  std::string Describe() const;

 private:
  Array(DType dtype, Shape shape, Strides strides, std::shared_ptr<Storage> storage,
        size_t byte_offset);

  DType dtype_ = DType::kF32;
  Shape shape_;
  Strides strides_;
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
};

// Row-major strides for a shape (in elements).
Strides RowMajorStrides(const Shape& shape);

}  // namespace kvstore

#endif  // KVSTORE_ARRAY_H_
