// In-memory saves with the writer's hooks (the HMAC seal), for the library's
// own users of prompt-cache bytes; the public entry points are in
// kvstore/prompt_cache_bytes.h.
#ifndef KVSTORE_LIBKVSTORE_FORMAT_BYTES_IO_H_
#define KVSTORE_LIBKVSTORE_FORMAT_BYTES_IO_H_

#include <string>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/format/writer.h"

namespace kvstore {

// `reserve`: the bytes to allocate up front (the expected size), so that
// appending never reallocates.
Result<std::string> SaveLayersToString(size_t num_layers, const LayerSource& source, const Metadata& user_metadata,
                                       const SavePromptCacheOptions& options, const WriterHooks& hooks,
                                       size_t reserve = 0);

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_FORMAT_BYTES_IO_H_
