// kvstore.load / save / inspect / verify / convert / trim and the CacheFile
// that load returns. Every call releases the GIL while it reads, hashes,
// compresses or writes, and may run from many threads at once.
#ifndef KVSTORE_PYTHON_PY_FILE_H_
#define KVSTORE_PYTHON_PY_FILE_H_

#include <pybind11/pybind11.h>

#include <filesystem>
#include <optional>
#include <string>

#include "kvstore/json.h"
#include "kvstore/prompt_cache_file.h"

namespace kvstore::python {

// A path argument as the library takes it: a leading "~" expanded
// (kvstore::ExpandUserPath); InvalidArgumentError when it cannot be.
std::string UserPath(const std::filesystem::path& path);

// A JSON value as Python objects (objects keep their key order).
pybind11::object JsonToPython(const Json& value);

// "mlx-lm" / "mlx-swift-lm" -> layout; InvalidArgumentError otherwise.
PromptCacheLayout ParseLayoutName(const std::string& name);

// compress: None/False = plain, True = the codec's default level, int = level.
std::optional<int> ParseCompression(pybind11::handle compress, ZstdCodec codec);
// ParseZstdCodec, InvalidArgumentError for a name it does not know.
ZstdCodec ParseCodecName(const std::string& name);
// integrity=True|"sha256"|"xxh3"|False: the digest algorithm (True is
// SHA-256), nullopt for False; ValueError for anything else.
std::optional<DigestAlgorithm> ParseIntegrity(pybind11::handle integrity);

void RegisterFileApi(pybind11::module_& m);
void RegisterConvertApi(pybind11::module_& m);
// _kvstore.open_for_mlx (py_mlx_read.cc).
void RegisterMlxRead(pybind11::module_& m);

}  // namespace kvstore::python

#endif  // KVSTORE_PYTHON_PY_FILE_H_
