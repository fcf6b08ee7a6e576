// MemoryFile: a ReadableFile over bytes held in memory (a decompressed
// file, or a private copy of a file that another program may rewrite).
#ifndef KVSTORE_LIBKVSTORE_IO_MEMORY_FILE_H_
#define KVSTORE_LIBKVSTORE_IO_MEMORY_FILE_H_

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "kvstore/array.h"
#include "kvstore/env.h"

namespace kvstore {

class MemoryFile final : public ReadableFile {
 public:
  MemoryFile(std::string path, std::shared_ptr<Storage> storage)
      : ReadableFile(std::move(path)), storage_(std::move(storage)) {}
  std::span<const std::byte> data() const override { return {storage_->data(), storage_->size()}; }

 private:
  std::shared_ptr<Storage> storage_;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_IO_MEMORY_FILE_H_
