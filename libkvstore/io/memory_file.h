// MemoryFile: a ReadableFile over bytes held in memory (a decompressed
// file, or a private copy of a file that another program may rewrite).
#ifndef KVSTORE_LIBKVSTORE_IO_MEMORY_FILE_H_
#define KVSTORE_LIBKVSTORE_IO_MEMORY_FILE_H_

#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>

#include "kvstore/array.h"
#include "kvstore/env.h"
#include "kvstore/status.h"

namespace kvstore {

class MemoryFile final : public ReadableFile {
 public:
  MemoryFile(std::string path, std::shared_ptr<Storage> storage)
      : ReadableFile(std::move(path)), storage_(std::move(storage)) {}
  std::span<const std::byte> data() const override { return {storage_->data(), storage_->size()}; }

 private:
  std::shared_ptr<Storage> storage_;
};

// Uninitialised storage for a private copy of the `size`-byte file at
// `path`: ResourceExhausted naming both when memory is short (a slot file
// can be many GB), never std::bad_alloc through the API.
inline Result<std::shared_ptr<Storage>> AllocateFileCopy(const std::string& path, size_t size) {
  try {
    return Storage::AllocateUninitialized(size);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("read '" + path + "': cannot allocate " + std::to_string(size) +
                                     " bytes to hold the file");
  }
}

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_IO_MEMORY_FILE_H_
