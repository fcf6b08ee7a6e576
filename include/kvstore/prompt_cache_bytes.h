// Prompt-cache files in memory: the exact bytes SavePromptCache writes to a
// file, as a string, and the readers over such bytes. For prompt caches kept
// outside a file system, e.g. the shared tier's chunks in Redis
// (docs/format.md §8): a value dumped to a file reads with `kvtool inspect`.
//
// Thread safety: every function is reentrant. A reader over bytes is
// immutable like one over a file; the caches it builds view `bytes`
// (zero-copy) and keep it alive.
#ifndef KVSTORE_PROMPT_CACHE_BYTES_H_
#define KVSTORE_PROMPT_CACHE_BYTES_H_

#include <memory>
#include <string>

#include "kvstore/prompt_cache_file.h"

namespace kvstore {

// The file SavePromptCache(env, path, cache, user_metadata, options) would
// write, byte for byte. Errors as SavePromptCache's (no I/O errors).
Result<std::string> SavePromptCacheToString(const PromptCache& cache, const Metadata& user_metadata,
                                            const SavePromptCacheOptions& options = {});

// A reader over `bytes` as PromptCacheReader::Open gives over a file;
// errors name the source "(in memory)". REQUIRES: bytes != nullptr.
Result<std::unique_ptr<PromptCacheReader>> OpenPromptCacheReader(std::shared_ptr<const std::string> bytes,
                                                                 const PromptCacheReader::Options& options = {});

// LoadPromptCache over `bytes`. REQUIRES: bytes != nullptr.
Result<LoadedPromptCache> LoadPromptCacheFromString(std::shared_ptr<const std::string> bytes,
                                                    const LoadPromptCacheOptions& options = {});

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_BYTES_H_
