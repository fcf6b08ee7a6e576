// CowBuffer: an array a cache owns and writes in place, shared copy-on-write
// with snapshots.
//
// A cache hands out two kinds of arrays over its buffer:
//   * fetch views (UpdateAndFetch results): plain views, whose contents may
//     change at the cache's next write (documented in cache.h);
//   * snapshots (State(), Copy()): values that must never change. Taking one
//     marks the buffer shared; the next in-place write then copies the buffer
//     first if the snapshot (or anything else) still references its storage.
// Storage that is read-only (a mapped file) is always copied before a write.
//
// Thread safety: Snapshot() is const and may run concurrently with other
// const calls (the flag is atomic); writes follow the cache's single-writer rule.
#ifndef KVSTORE_LIBKVSTORE_CACHE_COW_BUFFER_H_
#define KVSTORE_LIBKVSTORE_CACHE_COW_BUFFER_H_

#include <atomic>
#include <cstdint>

#include "kvstore/array.h"
#include "kvstore/status.h"

namespace kvstore {

class CowBuffer {
 public:
  CowBuffer() = default;
  explicit CowBuffer(Array array) : array_(std::move(array)) {}
  // Copies share the array and mark both sides shared (copy-on-write).
  CowBuffer(const CowBuffer& other);
  CowBuffer& operator=(const CowBuffer& other);
  CowBuffer(CowBuffer&& other) noexcept;
  CowBuffer& operator=(CowBuffer&& other) noexcept;

  bool defined() const { return array_.defined(); }
  // The current buffer. Views of it are fetch views (see above).
  const Array& array() const { return array_; }

  // A snapshot of elements [start, stop) of `axis` (the whole buffer when
  // called without arguments) that later writes will not change.
  Array Snapshot() const;
  Array Snapshot(int axis, int64_t start, int64_t stop) const;

  // Replaces the buffer (e.g. after growing it by concatenation).
  void Reset(Array array);
  void Clear() { Reset(Array()); }

  // Makes the buffer safe to write in place: copies it when a snapshot may
  // still hold it or its storage is read-only. Returns the writable array.
  Array& MutableArray();
  // Writes `src` into elements [start, start + src.dim(axis)) of `axis`.
  // REQUIRES: the range lies inside the buffer; src matches in dtype and in
  // every other dimension.
  Status Write(int axis, int64_t start, const Array& src);

 private:
  Array array_;
  mutable std::atomic<bool> shared_{false};
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_CACHE_COW_BUFFER_H_
