#include "libkvstore/cache/cow_buffer.h"

#include <utility>

namespace kvstore {

CowBuffer::CowBuffer(const CowBuffer& other) : array_(other.array_) {
  if (array_.defined()) {
    other.shared_.store(true, std::memory_order_relaxed);
    shared_.store(true, std::memory_order_relaxed);
  }
}

CowBuffer& CowBuffer::operator=(const CowBuffer& other) {
  if (this != &other) {
    array_ = other.array_;
    bool shared = array_.defined();
    if (shared) other.shared_.store(true, std::memory_order_relaxed);
    shared_.store(shared, std::memory_order_relaxed);
  }
  return *this;
}

CowBuffer::CowBuffer(CowBuffer&& other) noexcept
    : array_(std::move(other.array_)),
      shared_(other.shared_.load(std::memory_order_relaxed)) {
  other.array_ = Array();
  other.shared_.store(false, std::memory_order_relaxed);
}

CowBuffer& CowBuffer::operator=(CowBuffer&& other) noexcept {
  if (this != &other) {
    array_ = std::move(other.array_);
    shared_.store(other.shared_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    other.array_ = Array();
    other.shared_.store(false, std::memory_order_relaxed);
  }
  return *this;
}

Array CowBuffer::Snapshot() const {
  shared_.store(true, std::memory_order_relaxed);
  return array_;
}

Array CowBuffer::Snapshot(int axis, int64_t start, int64_t stop) const {
  shared_.store(true, std::memory_order_relaxed);
  return array_.Slice(axis, start, stop);
}

void CowBuffer::Reset(Array array) {
  array_ = std::move(array);
  shared_.store(false, std::memory_order_relaxed);
}

Array& CowBuffer::MutableArray() {
  // Fetch views also hold the storage, so use_count alone cannot tell a live
  // snapshot from a stale fetch view; the flag narrows copies to buffers
  // that were actually snapshotted.
  bool must_copy = !array_.storage()->writable() ||
                   (shared_.load(std::memory_order_relaxed) && !array_.storage_unique());
  if (must_copy) array_ = array_.Clone();
  shared_.store(false, std::memory_order_relaxed);
  return array_;
}

Status CowBuffer::Write(int axis, int64_t start, const Array& src) {
  Array& dst = MutableArray();
  int64_t stop = start + src.dim(axis);
  return dst.Slice(axis, start, stop).CopyFrom(src);
}

}  // namespace kvstore
