// The JSON form of a prompt-cache file's description: the object that
// `kvtool inspect --json` prints and the Python package's `inspect()` and
// `CacheFile.info` return (docs/cli.md lists its fields).
//
// Thread safety: pure functions of their arguments.
#ifndef KVSTORE_PROMPT_CACHE_INFO_JSON_H_
#define KVSTORE_PROMPT_CACHE_INFO_JSON_H_

#include <optional>
#include <string_view>

#include "kvstore/cache_state.h"
#include "kvstore/json.h"
#include "kvstore/prompt_cache_file.h"

namespace kvstore {

// A meta state as JSON: strings stay strings, lists become arrays.
Json MetaStateJson(const MetaState& meta);

// The description of `info`, read from `path`. `verified` is the outcome of
// a digest check when one was made (null in the JSON otherwise); it is
// ignored for a file without digests ("integrity": null).
Json PromptCacheInfoJson(const PromptCacheInfo& info, std::string_view path,
                         std::optional<bool> verified);

}  // namespace kvstore

#endif  // KVSTORE_PROMPT_CACHE_INFO_JSON_H_
