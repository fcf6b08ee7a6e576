#include "kvstore/array.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <limits>
#include <new>
#include <sstream>

#include "libkvstore/tensor/convert.h"

namespace kvstore {

// ---- Shapes ----

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  out += "]";
  return out;
}

int64_t ShapeNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

Strides RowMajorStrides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// ---- Storage ----

namespace {
constexpr size_t kAlignment = 64;

std::byte* AlignedAlloc(size_t nbytes) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  size_t rounded = (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}
}  // namespace

Storage::Storage(std::byte* data, size_t size, bool writable, std::shared_ptr<const void> owner)
    : data_(data), size_(size), writable_(writable), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (owner_ == nullptr) std::free(data_);
}

std::shared_ptr<Storage> Storage::Allocate(size_t nbytes) {
  std::byte* p = AlignedAlloc(nbytes);
  std::memset(p, 0, nbytes);
  return std::shared_ptr<Storage>(new Storage(p, nbytes, true, nullptr));
}

std::shared_ptr<Storage> Storage::AllocateUninitialized(size_t nbytes) {
  return std::shared_ptr<Storage>(new Storage(AlignedAlloc(nbytes), nbytes, true, nullptr));
}

std::shared_ptr<Storage> Storage::WrapReadOnly(const std::byte* data, size_t nbytes,
                                               std::shared_ptr<const void> owner) {
  if (owner == nullptr) {
    // A non-null owner marks "not ours to free"; an empty one is enough.
    owner = std::make_shared<int>(0);
  }
  // const_cast is safe: writable_ is false, so mutable_data() refuses it.
  return std::shared_ptr<Storage>(
      new Storage(const_cast<std::byte*>(data), nbytes, false, std::move(owner)));
}

std::byte* Storage::mutable_data() {
  assert(writable_);
  return data_;
}

// ---- Array: construction ----

Array::Array(DType dtype, Shape shape, Strides strides, std::shared_ptr<Storage> storage,
             size_t byte_offset)
    : dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      storage_(std::move(storage)),
      byte_offset_(byte_offset) {}

Array Array::Zeros(DType dtype, const Shape& shape) {
  const int64_t n = ShapeNumel(shape);
  assert(n >= 0);
  return Array(dtype, shape, RowMajorStrides(shape),
               Storage::Allocate(static_cast<size_t>(n) * DTypeSize(dtype)), 0);
}

namespace {
Array Uninitialized(DType dtype, const Shape& shape) {
  return Array::FromStorage(
      dtype, shape,
      Storage::AllocateUninitialized(static_cast<size_t>(ShapeNumel(shape)) * DTypeSize(dtype)),
      0);
}
}  // namespace

Array Array::FromBytes(DType dtype, const Shape& shape, std::span<const std::byte> bytes) {
  assert(ShapeNumel(shape) >= 0 &&
         bytes.size() == static_cast<size_t>(ShapeNumel(shape)) * DTypeSize(dtype));
  auto storage = Storage::AllocateUninitialized(bytes.size());
  if (!bytes.empty()) std::memcpy(storage->mutable_data(), bytes.data(), bytes.size());
  return Array(dtype, shape, RowMajorStrides(shape), std::move(storage), 0);
}

Array Array::FromInt32s(std::span<const int32_t> values) {
  return FromValues<int32_t>(DType::kI32, {static_cast<int64_t>(values.size())}, values);
}

Array Array::FromStorage(DType dtype, const Shape& shape, std::shared_ptr<Storage> storage,
                         size_t byte_offset) {
  assert(ShapeNumel(shape) >= 0 &&
         byte_offset + static_cast<size_t>(ShapeNumel(shape)) * DTypeSize(dtype) <=
             storage->size());
  return Array(dtype, shape, RowMajorStrides(shape), std::move(storage), byte_offset);
}

// ---- Array: properties ----

namespace {
int NormalizeAxis(int axis, int ndim) {
  if (axis < 0) axis += ndim;
  assert(axis >= 0 && axis < ndim);
  return axis;
}
}  // namespace

int64_t Array::dim(int axis) const { return shape_[NormalizeAxis(axis, ndim())]; }

int64_t Array::numel() const { return ShapeNumel(shape_); }

bool Array::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 0) return true;  // no elements: any strides are dense
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

bool Array::is_aligned() const {
  return reinterpret_cast<uintptr_t>(data()) % itemsize() == 0;
}

// ---- Views ----

Array Array::Slice(int axis, int64_t start, int64_t stop) const {
  axis = NormalizeAxis(axis, ndim());
  assert(0 <= start && start <= stop && stop <= shape_[axis]);
  Shape shape = shape_;
  shape[axis] = stop - start;
  const size_t offset =
      byte_offset_ + static_cast<size_t>(start * strides_[axis]) * itemsize();
  // An empty slice at the very end would point one past the data; harmless
  // because no element of it is ever read.
  return Array(dtype_, std::move(shape), strides_, storage_, start == stop ? byte_offset_ : offset);
}

Array Array::Reshape(const Shape& shape) const {
  assert(ShapeNumel(shape) == numel());
  if (!is_contiguous()) return Contiguous().Reshape(shape);
  return Array(dtype_, shape, RowMajorStrides(shape), storage_, byte_offset_);
}

// ---- Reading elements ----

void Array::ForEachRun(const std::function<void(std::span<const std::byte>)>& fn) const {
  const int64_t n = numel();
  if (n == 0) return;
  const size_t item = itemsize();
  // Merge trailing dims that are dense into one run.
  int inner = ndim();
  int64_t run = 1;
  while (inner > 0) {
    const int d = inner - 1;
    if (shape_[d] != 1 && strides_[d] != run) break;
    run *= shape_[d];
    --inner;
  }
  const std::byte* base = data();
  const size_t run_bytes = static_cast<size_t>(run) * item;
  if (inner == 0) {
    fn({base, run_bytes});
    return;
  }
  // Odometer over the outer dims [0, inner).
  std::vector<int64_t> index(static_cast<size_t>(inner), 0);
  int64_t offset = 0;  // in elements
  const int64_t runs = n / run;
  for (int64_t r = 0; r < runs; ++r) {
    fn({base + offset * static_cast<int64_t>(item), run_bytes});
    for (int d = inner - 1; d >= 0; --d) {
      if (++index[d] < shape_[d]) {
        offset += strides_[d];
        break;
      }
      offset -= (shape_[d] - 1) * strides_[d];
      index[d] = 0;
    }
  }
}

std::vector<std::byte> Array::ToBytes() const {
  std::vector<std::byte> out(nbytes());
  size_t pos = 0;
  ForEachRun([&](std::span<const std::byte> run) {
    std::memcpy(out.data() + pos, run.data(), run.size());
    pos += run.size();
  });
  return out;
}

const std::byte* Array::ElementPtr(std::span<const int64_t> index) const {
  assert(static_cast<int>(index.size()) == ndim());
  int64_t offset = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    assert(index[i] >= 0 && index[i] < shape_[i]);
    offset += index[i] * strides_[i];
  }
  return data() + offset * static_cast<int64_t>(itemsize());
}

bool Array::ContentEquals(const Array& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (is_contiguous() && other.is_contiguous()) {
    return nbytes() == 0 || std::memcmp(data(), other.data(), nbytes()) == 0;
  }
  return ToBytes() == other.ToBytes();
}

std::string Array::Describe() const {
  return std::string(DTypeName(dtype_)) + ShapeToString(shape_);
}

// ---- New storage ----

Array Array::Clone() const {
  Array out = Uninitialized(dtype_, shape_);
  std::byte* dst = out.storage_->mutable_data();
  ForEachRun([&](std::span<const std::byte> run) {
    std::memcpy(dst, run.data(), run.size());
    dst += run.size();
  });
  return out;
}

Array Array::Contiguous() const {
  if (is_contiguous() && is_aligned()) return *this;
  return Clone();
}

Result<Array> Array::AsType(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (!IsConvertible(dtype_) || !IsConvertible(dtype)) {
    return Status::NotSupported("AsType: cannot convert " + std::string(DTypeName(dtype_)) +
                                " to " + std::string(DTypeName(dtype)) +
                                " (storage-only dtype)");
  }
  Array src = Contiguous();
  Array out = Uninitialized(dtype, shape_);
  ConvertElements(dtype_, src.data(), dtype, out.storage_->mutable_data(),
                  static_cast<size_t>(numel()));
  return out;
}

Array Array::Concatenate(std::span<const Array> arrays, int axis) {
  assert(!arrays.empty());
  const Array& first = arrays[0];
  axis = NormalizeAxis(axis, first.ndim());
  Shape shape = first.shape();
  shape[axis] = 0;
  for (const Array& a : arrays) {
    assert(a.dtype() == first.dtype() && a.ndim() == first.ndim());
    shape[axis] += a.shape()[axis];
  }
  Array out = Uninitialized(first.dtype(), shape);
  int64_t pos = 0;
  for (const Array& a : arrays) {
    const int64_t len = a.shape()[axis];
    Status s = out.Slice(axis, pos, pos + len).CopyFrom(a);
    assert(s.ok());
    (void)s;
    pos += len;
  }
  return out;
}

Array Array::Take(int axis, std::span<const int64_t> indices) const {
  axis = NormalizeAxis(axis, ndim());
  Shape shape = shape_;
  shape[axis] = static_cast<int64_t>(indices.size());
  Array out = Uninitialized(dtype_, shape);
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t j = indices[i];
    assert(j >= 0 && j < shape_[axis]);
    const int64_t k = static_cast<int64_t>(i);
    Status s = out.Slice(axis, k, k + 1).CopyFrom(Slice(axis, j, j + 1));
    assert(s.ok());
    (void)s;
  }
  return out;
}

Array Array::Roll(int axis, int64_t shift) const {
  axis = NormalizeAxis(axis, ndim());
  const int64_t n = shape_[axis];
  if (n == 0) return Clone();
  const int64_t s = ((shift % n) + n) % n;
  // out = concat(in[n-s:], in[:n-s])
  const Array parts[2] = {Slice(axis, n - s, n), Slice(axis, 0, n - s)};
  return Concatenate(parts, axis);
}

// ---- In-place write ----

Status Array::CopyFrom(const Array& src) {
  if (src.dtype_ != dtype_ || src.shape_ != shape_) {
    return Status::InvalidArgument("CopyFrom: source " + src.Describe() +
                                   " does not match destination " + Describe());
  }
  if (!storage_->writable()) {
    return Status::FailedPrecondition("CopyFrom: destination " + Describe() +
                                      " is read-only storage");
  }
  if (numel() == 0) return Status::OK();
  // Source runs stream into destination runs; the run sizes may differ.
  std::vector<std::byte> staging;
  const std::byte* in = nullptr;
  if (src.is_contiguous()) {
    in = src.data();
  } else {
    staging = src.ToBytes();
    in = staging.data();
  }
  std::byte* base = storage_->mutable_data();
  ForEachRun([&](std::span<const std::byte> run) {
    std::byte* out = base + (run.data() - storage_->data());
    std::memmove(out, in, run.size());  // memmove: src may be these very elements
    in += run.size();
  });
  return Status::OK();
}

}  // namespace kvstore
