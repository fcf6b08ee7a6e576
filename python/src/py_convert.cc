// kvstore.convert and kvstore.trim: kvtool convert / trim as functions.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdio>
#include <limits>
#include <string>

#include "kvstore/cache_convert.h"
#include "kvstore/prompt_cache_rewrite.h"
#include "kvstore/quantize.h"
#include "python/src/py_errors.h"
#include "python/src/py_file.h"
#include "python/src/py_strided.h"
#include "python/src/py_tensor.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

// quantize: None, bits, (bits, group) or "BITS[:GROUP]".
void ParseQuantize(py::handle quantize, RewriteOptions& t) {
  if (quantize.is_none()) return;
  if (py::isinstance<py::str>(quantize)) {
    const std::string spec = quantize.cast<std::string>();
    if (std::sscanf(spec.c_str(), "%d:%d", &t.quantize_bits, &t.quantize_group) < 1) ThrowInvalid("quantize must be BITS[:GROUP], got \"" + spec + "\"");
  } else if (py::isinstance<py::tuple>(quantize) && py::len(quantize) == 2) {
    t.quantize_bits = static_cast<int>(IntArg(quantize[py::int_(0)], "quantize bits", 0, 64));
    t.quantize_group = static_cast<int>(IntArg(quantize[py::int_(1)], "quantize group", 0, 1024));
  } else if (py::isinstance<py::int_>(quantize) && !py::isinstance<py::bool_>(quantize)) {
    t.quantize_bits = static_cast<int>(IntArg(quantize, "quantize bits", 0, 64));
  } else {
    ThrowInvalid("quantize must be None, bits, (bits, group) or \"BITS[:GROUP]\"");
  }
  if (!IsSupportedQuantization(t.quantize_bits, t.quantize_group)) {
    ThrowInvalid("quantize takes bits 2, 3, 4, 5, 6, 8 and group 32, 64, 128");
  }
}

void Convert(const std::filesystem::path& in_path, const std::filesystem::path& out_path, const py::object& compress,
             std::optional<std::string> codec, const py::object& integrity, std::optional<std::string> layout,
             const py::object& quantize,
             bool dequantize, bool gpu_rounding, std::optional<std::string> dtype, int threads) {
  const std::string in = UserPath(in_path), out = UserPath(out_path);
  // Every None is as the input (RewritePromptCacheFile decides).
  RewriteOptions o;
  if (!integrity.is_none()) {
    o.digest = ParseIntegrity(integrity);
    o.integrity = o.digest.has_value();
  }
  ParseQuantize(quantize, o);
  if (dequantize && o.quantize_bits != 0) ThrowInvalid("quantize and dequantize exclude each other");
  o.dequantize = dequantize;
  if (gpu_rounding) o.rounding = QuantizeOptions::Rounding::kGpu;
  if (dtype) {
    o.dtype = ParseDTypeName(*dtype);
    if (!IsCastLayerDType(*o.dtype)) ThrowInvalid("dtype must be F16, BF16 or F32");
  }
  if (layout) o.layout = ParseLayoutName(*layout);
  if (codec) o.codec = ParseCodecName(*codec);
  if (py::isinstance<py::bool_>(compress)) {
    o.compress = compress.cast<bool>();
  } else if (py::isinstance<py::int_>(compress)) {
    o.level = ParseCompression(compress, o.codec.value_or(ZstdCodec::kZstd));
  } else if (!compress.is_none()) {
    ThrowInvalid("compress must be None, a bool or a zstd level");
  }
  if (o.compress == false && o.codec) ThrowInvalid("codec applies to compressed output");
  o.threads = threads;
  Result<RewriteResult> result = [&] {
    py::gil_scoped_release release;
    return RewritePromptCacheFile(Env::Default(), in, out, o);
  }();
  ThrowIfError(result.status());
}

int64_t Trim(const std::filesystem::path& in_path, const std::filesystem::path& out_path, py::object n_arg,
             py::object keep_arg, std::optional<std::string> layout, int threads) {
  const std::string in = UserPath(in_path), out = UserPath(out_path);
  if (n_arg.is_none() == keep_arg.is_none()) ThrowInvalid("give exactly one of n and keep");
  constexpr int64_t kMaxTokens = std::numeric_limits<int64_t>::max();
  std::optional<int64_t> n, keep;
  if (!n_arg.is_none()) n = IntArg(n_arg, "n (tokens to trim)", 0, kMaxTokens);
  if (!keep_arg.is_none()) keep = IntArg(keep_arg, "keep (tokens to keep)", 0, kMaxTokens);
  RewriteOptions o;  // everything else as the input
  o.trim = n;
  o.keep = keep;
  if (layout) o.layout = ParseLayoutName(*layout);
  o.threads = threads;
  auto trimmed = [&]() -> Result<int64_t> {
    py::gil_scoped_release release;
    KV_ASSIGN_OR_RETURN(RewriteResult r, RewritePromptCacheFile(Env::Default(), in, out, o));
    return r.trimmed.value_or(0);
  }();
  return Unwrap(std::move(trimmed));
}

}  // namespace

void RegisterConvertApi(py::module_& m) {
  m.def("convert", &Convert, py::arg("src"), py::arg("dst"), py::kw_only(), py::arg("compress") = py::none(),
        py::arg("codec") = py::none(), py::arg("integrity") = py::none(), py::arg("layout") = py::none(),
        py::arg("quantize") = py::none(), py::arg("dequantize") = false, py::arg("gpu_rounding") = false,
        py::arg("dtype") = py::none(), py::arg("threads") = 0,
        R"doc(Rewrite a prompt-cache file, as `kvtool convert`; None keeps what the input has.

compress: False decompresses, True the default zstd level, an int a level; codec:
"zstd" or "byteplane"; integrity: None keeps the input's digests, True or "sha256" / "xxh3"
writes them with that algorithm, False drops them; layout:
one of kvstore._kvstore.LAYOUTS; quantize: bits, (bits, group) or "BITS[:GROUP]";
dequantize: back to plain KV caches; dtype: "F16", "BF16" or "F32". The output is
written atomically. Raises InvalidArgumentError for bad arguments and as load does.)doc");
  m.def("trim", &Trim, py::arg("src"), py::arg("dst"), py::arg("n") = py::none(), py::kw_only(),
        py::arg("keep") = py::none(), py::arg("layout") = py::none(), py::arg("threads") = 0,
        R"doc(Drop the last n tokens of every layer (or keep only the first `keep`), as `kvtool trim`.

Give exactly one of n and keep. Writes dst atomically in src's format (layout: another
of kvstore._kvstore.LAYOUTS) and returns
the number of tokens dropped (of the first layer). Raises InvalidArgumentError for
bad arguments and NotSupportedError for a layer that cannot be trimmed (nothing
is written then).)doc");
}

}  // namespace kvstore::python
