#include "python/src/py_file.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>
#include <mutex>
#include <utility>

#include "kvstore/prompt_cache_info_json.h"
#include "kvstore/user_path.h"
#include "python/src/py_errors.h"
#include "python/src/py_layer.h"
#include "python/src/py_strided.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

// What load() returns. Immutable except for the info dict, computed once.
class PyCacheFile {
 public:
  PyCacheFile(std::string path, LoadedPromptCache loaded)
      : path_(std::move(path)), loaded_(std::move(loaded)), layers_(LayersToPython(loaded_.cache)) {}

  const std::string& path() const { return path_; }
  const LoadedPromptCache& loaded() const { return loaded_; }
  const py::list& layers() const { return layers_; }
  py::dict metadata() const {
    py::dict out;
    for (const auto& [k, v] : loaded_.user_metadata) out[py::str(k)] = py::str(v);
    return out;
  }
  py::object info() {
    if (info_.is_none()) {
      std::optional<bool> verified;
      if (loaded_.verified) verified = true;
      auto info = [&] {
        py::gil_scoped_release release;
        return ReadPromptCacheInfo(Env::Default(), path_);
      }();
      info_ = JsonToPython(PromptCacheInfoJson(Unwrap(std::move(info)), path_, verified));
    }
    return info_;
  }

 private:
  std::string path_;
  LoadedPromptCache loaded_;
  py::list layers_;
  py::object info_ = py::none();
};

Metadata MetadataFromPython(py::handle metadata) {
  Metadata out;
  if (metadata.is_none()) return out;
  if (!py::isinstance<py::dict>(metadata)) ThrowInvalid("metadata must be a dict of str to str");
  for (auto [k, v] : metadata.cast<py::dict>()) {
    if (!py::isinstance<py::str>(k) || !py::isinstance<py::str>(v)) {
      ThrowInvalid("metadata must be a dict of str to str (key " + std::string(py::repr(k)) + ")");
    }
    out.emplace_back(k.cast<std::string>(), v.cast<std::string>());
  }
  return out;
}

py::object Load(const std::filesystem::path& file, bool verify, int threads) {
  const std::string path = UserPath(file);
  LoadPromptCacheOptions options;
  options.verify = verify;
  options.threads = threads;
  auto loaded = [&] {
    py::gil_scoped_release release;
    return LoadPromptCache(Env::Default(), path, options);
  }();
  return py::cast(PyCacheFile(path, Unwrap(std::move(loaded))));
}

void Save(const std::filesystem::path& file, const py::object& layers, const py::object& metadata,
          const py::object& compress, const std::string& codec, const py::object& integrity,
          const std::optional<std::string>& layout, int threads, bool durable) {
  const std::string path = UserPath(file);
  SavePromptCacheOptions options;  // layout: the library's default for saves from scratch unless asked
  if (layout) options.layout = ParseLayoutName(*layout);
  options.codec = ParseCodecName(codec);
  options.compression_level = ParseCompression(compress, options.codec);
  const std::optional<DigestAlgorithm> digest = ParseIntegrity(integrity);
  options.integrity = digest.has_value();
  options.digest = digest.value_or(DigestAlgorithm::kSha256);
  options.durability = durable ? Durability::kAlways : Durability::kNone;
  options.threads = threads;
  const PromptCache cache = LayersFromPython(layers);
  const Metadata md = MetadataFromPython(metadata);
  Status s;
  {
    py::gil_scoped_release release;
    s = SavePromptCache(Env::Default(), path, cache, md, options);
  }
  ThrowIfError(s);
}

// Raises `status` as its exception with `info` attached (what kvtool prints
// before it exits non-zero).
[[noreturn]] void ThrowWithInfo(const Status& status, const py::object& info) {
  try {
    ThrowStatus(status);
  } catch (py::error_already_set& e) {
    e.value().attr("info") = info;
    throw;
  }
}

// A verification's failure as every front end words it (the library's
// messages), with how to add digests when there are none.
Status VerificationStatus(const std::string& path, const VerifyReport& report) {
  Status s = report.ToStatus(path);
  if (!report.has_digests) {
    return Status::FailedPrecondition(std::string(s.message()) +
                                      " (save it with integrity=True, or convert(..., integrity=True) to add them)");
  }
  return s;
}

py::object Inspect(const std::filesystem::path& file, bool verify) {
  const std::string path = UserPath(file);
  std::optional<VerifyReport> report;
  std::unique_ptr<PromptCacheReader> reader;
  Status open = [&]() -> Status {
    py::gil_scoped_release release;
    KV_ASSIGN_OR_RETURN(reader, PromptCacheReader::Open(Env::Default(), path));
    if (verify && reader->info().has_digests) {
      KV_ASSIGN_OR_RETURN(report, reader->Verify());
    }
    return Status::OK();
  }();
  ThrowIfError(open);
  const std::optional<bool> verified = report ? std::optional(report->ok()) : std::nullopt;
  py::object out = JsonToPython(PromptCacheInfoJson(reader->info(), path, verified));
  // As kvtool inspect --verify: a mismatch, the first impossible layer, what
  // cannot be loaded, then a file without digests to verify.
  if (report && !report->ok()) ThrowWithInfo(VerificationStatus(path, *report), out);
  if (Status s = reader->Validate(); !s.ok()) ThrowWithInfo(s, out);
  if (verify && !report) ThrowWithInfo(VerificationStatus(path, VerifyReport{}), out);
  return out;
}

py::dict Verify(const std::filesystem::path& file, int threads) {
  const std::string path = UserPath(file);
  // As kvtool verify: an impossible layer (Corruption) first, then the
  // digests, then a layer kvstore cannot load.
  Status valid;
  auto report = [&]() -> Result<VerifyReport> {
    py::gil_scoped_release release;
    PromptCacheReader::Options open;
    open.threads = threads;
    KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(Env::Default(), path, open));
    valid = reader->Validate();
    if (valid.IsCorruption()) return valid;
    return reader->Verify(threads);
  }();
  VerifyReport r = Unwrap(std::move(report));
  ThrowIfError(VerificationStatus(path, r));
  ThrowIfError(valid);
  py::dict out;
  out["path"] = path;
  out["bytes_hashed"] = r.bytes_hashed;
  return out;
}

}  // namespace

py::object JsonToPython(const Json& value) {
  switch (value.type()) {
    case Json::Type::kNull: return py::none();
    case Json::Type::kBool: return py::bool_(value.as_bool());
    case Json::Type::kInt: return py::int_(value.as_int());
    case Json::Type::kUint:
    case Json::Type::kDouble: {
      // Through text: keeps uint64 exact and doubles as written.
      return py::module_::import("json").attr("loads")(value.Dump());
    }
    case Json::Type::kString: return py::str(value.as_string());
    case Json::Type::kArray: {
      py::list out;
      for (const Json& item : value.as_array()) out.append(JsonToPython(item));
      return out;
    }
    case Json::Type::kObject: {
      py::dict out;
      for (const auto& [k, v] : value.as_object()) out[py::str(k)] = JsonToPython(v);
      return out;
    }
  }
  return py::none();
}

std::string UserPath(const std::filesystem::path& path) { return Unwrap(ExpandUserPath(path.string())); }

// The layouts save() and convert() write, by name (exported as kvstore._kvstore.LAYOUTS).
constexpr PromptCacheLayout kWritableLayouts[] = {PromptCacheLayout::kMlxLm032, PromptCacheLayout::kMlxLm031, PromptCacheLayout::kMlxLm,
                                                  PromptCacheLayout::kMlxSwiftLm};

PromptCacheLayout ParseLayoutName(const std::string& name) {
  std::string names;
  for (PromptCacheLayout layout : kWritableLayouts) {
    if (LayoutName(layout) == name) return layout;
    names += (names.empty() ? "\"" : ", \"") + std::string(LayoutName(layout)) + "\"";
  }
  ThrowInvalid("layout must be one of " + names + ", got \"" + name + "\"");
}

std::optional<DigestAlgorithm> ParseIntegrity(py::handle integrity) {
  if (py::isinstance<py::bool_>(integrity)) {
    return integrity.cast<bool>() ? std::optional(DigestAlgorithm::kSha256) : std::nullopt;
  }
  if (py::isinstance<py::str>(integrity)) {
    const std::string name = integrity.cast<std::string>();
    if (name == "sha256" || name == "xxh3") return DigestAlgorithmFromName(name);
  }
  ThrowInvalid("integrity must be True, \"sha256\", \"xxh3\" or False (got " + std::string(py::repr(integrity)) + ")");
}

ZstdCodec ParseCodecName(const std::string& name) {
  if (std::optional<ZstdCodec> codec = ParseZstdCodec(name)) return *codec;
  ThrowInvalid("codec must be \"zstd\" or \"byteplane\", got \"" + name + "\"");
}

std::optional<int> ParseCompression(py::handle compress, ZstdCodec codec) {
  if (compress.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(compress)) {
    if (!compress.cast<bool>()) return std::nullopt;
    return DefaultZstdLevel(codec);
  }
  if (py::isinstance<py::int_>(compress)) {
    const ZstdLevelRange levels = ZstdLevels();
    return static_cast<int>(IntArg(compress, "compress (a zstd level)", levels.min, levels.max));
  }
  ThrowInvalid("compress must be None, a bool or a zstd level");
}

void RegisterFileApi(py::module_& m) {
  py::class_<PyCacheFile>(m, "CacheFile", R"doc(
A loaded prompt-cache file, as kvstore.load returns it: its layers, user
metadata and format. Immutable; len(f), f[i] and iteration go over f.layers.)doc")
      .def_property_readonly("path", &PyCacheFile::path, "The path it was loaded from (str, '~' expanded).")
      .def_property_readonly("layers", &PyCacheFile::layers, "The cache layers (list of kvstore.Layer).")
      .def_property_readonly("metadata", &PyCacheFile::metadata,
                             "The user metadata (dict of str to str; kvstore's own keys left out).")
      .def_property_readonly("info", &PyCacheFile::info,
                             "The dict `kvtool inspect --json` prints (reads the header again, once).")
      .def_property_readonly(
          "layout", [](const PyCacheFile& f) { return std::string(LayoutName(f.loaded().layout)); },
          "The file's layout: \"mlx-lm\", \"mlx-lm-0.31\" or \"mlx-swift-lm\".")
      .def_property_readonly("compressed", [](const PyCacheFile& f) { return f.loaded().compressed; },
                             "True for a kvstore zstd container.")
      .def_property_readonly("has_digests", [](const PyCacheFile& f) { return f.loaded().has_digests; },
                             "True when the file stores SHA-256 digests of its tensors.")
      .def_property_readonly("verified", [](const PyCacheFile& f) { return f.loaded().verified; },
                             "True when the digests were checked at load (load(..., verify=True)).")
      .def("__len__", [](const PyCacheFile& f) { return py::len(f.layers()); }, "The number of layers.")
      .def(
          "__getitem__",
          [](const PyCacheFile& f, const py::object& index) -> py::object { return f.layers()[index]; },
          py::arg("index"), "f.layers[index]: a kvstore.Layer (or a list of them for a slice).")
      .def("__iter__", [](const PyCacheFile& f) -> py::object { return py::iter(f.layers()); },
           "Iterates over the layers.")
      .def("__repr__", [](const PyCacheFile& f) {
        return "kvstore.CacheFile('" + f.path() + "', " + std::to_string(py::len(f.layers())) + " layers)";
      });
  py::tuple layouts(std::size(kWritableLayouts));
  for (size_t i = 0; i < std::size(kWritableLayouts); ++i) layouts[i] = py::str(std::string(LayoutName(kWritableLayouts[i])));
  m.attr("LAYOUTS") = layouts;
  m.attr("DEFAULT_LAYOUT") = std::string(LayoutName(SavePromptCacheOptions{}.layout));  // docs/compat.md
  const ZstdLevelRange levels = ZstdLevels();
  m.attr("ZSTD_LEVELS") = py::make_tuple(levels.min, levels.max);  // compress= takes these, from libzstd
  m.def("load", &Load, py::arg("path"), py::kw_only(), py::arg("verify") = false, py::arg("threads") = 0,
        R"doc(Load a prompt-cache file (mlx-lm, mlx-swift-lm or kvstore; plain or compressed).

Costs O(header): the tensors are read-only views of the file mapping. verify=True
checks the SHA-256 digests first (CorruptionError naming the tensor on a mismatch,
FailedPreconditionError without digests); threads: 0 picks a default.
Returns a kvstore.CacheFile; raises NotFoundError, CorruptionError, NotSupportedError.)doc");
  m.def("save", &Save, py::arg("path"), py::arg("layers"), py::arg("metadata") = py::none(), py::kw_only(),
        py::arg("compress") = py::none(), py::arg("codec") = "zstd", py::arg("integrity") = true,
        py::arg("layout") = py::none(), py::arg("threads") = 0, py::arg("durable") = true,
        R"doc(Write layers to a prompt-cache file atomically (temp file, fsync unless
durable=False, rename).

layers: kvstore.Layer objects, a CacheFile, objects with class_name, state and
meta_state, or (class_name, state, meta_state) tuples; metadata: dict of str to str.
compress: None/False plain safetensors, True the default zstd level, an int a level;
codec: "zstd" or "byteplane"; integrity: True or "sha256" (SHA-256 digests, the
default), "xxh3" (XXH3-128 digests, for bit rot on local disks), False (none);
layout: None for kvstore.DEFAULT_LAYOUT, or one of kvstore._kvstore.LAYOUTS;
durable: False skips the fsyncs (a cache that can be recomputed).
Raises InvalidArgumentError for bad arguments or layers, FileIOError when writing fails.)doc");
  m.def("is_kvstore_metadata_key", [](const std::string& key) { return IsKvstoreMetadataKey(key); },
        py::arg("key"), "True for the metadata keys kvstore itself writes (kvstore_format, digests).");
  m.def("expand_user", [](const std::filesystem::path& path) { return UserPath(path); }, py::arg("path"),
        "The path with a leading '~' expanded as kvstore expands every path argument.");
  m.def("inspect", &Inspect, py::arg("path"), py::kw_only(), py::arg("verify") = false,
        R"doc(What `kvtool inspect --json [--verify]` prints about a file, as a dict.

Reads the header only, unless verify=True also checks the digests. Raises as
kvtool exits (CorruptionError, FailedPreconditionError without digests, ...),
with the dict attached to the exception as .info.)doc");
  m.def("verify", &Verify, py::arg("path"), py::kw_only(), py::arg("threads") = 0,
        R"doc(Check every tensor of a file against its SHA-256 digests, as `kvtool verify`.

Returns {"path", "bytes_hashed"}; raises CorruptionError on a mismatch (file,
tensor, expected and found digest) and FailedPreconditionError without digests.)doc");
}

}  // namespace kvstore::python
