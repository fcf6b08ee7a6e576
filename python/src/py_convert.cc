// kvstore.convert and kvstore.trim: kvtool convert / trim as functions.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdio>
#include <limits>
#include <string>

#include "kvstore/cache_convert.h"
#include "kvstore/quantize.h"
#include "python/src/py_errors.h"
#include "python/src/py_file.h"
#include "python/src/py_strided.h"
#include "python/src/py_tensor.h"

namespace py = pybind11;

namespace kvstore::python {

namespace {

// The per-layer changes convert() can make, applied in kvtool's order.
struct LayerTransform {
  int bits = 0;
  int group = 64;
  bool dequantize = false;
  QuantizeOptions::Rounding rounding = QuantizeOptions::Rounding::kCpu;
  std::optional<DType> dtype;

  bool any() const { return bits != 0 || dequantize || dtype.has_value(); }
  Result<std::shared_ptr<Cache>> operator()(std::shared_ptr<Cache> layer) const {
    if (dequantize) {
      KV_ASSIGN_OR_RETURN(layer, DequantizeLayer(layer));
    }
    if (dtype) {
      KV_ASSIGN_OR_RETURN(layer, CastLayer(layer, *dtype));
    }
    if (bits != 0) {
      KV_ASSIGN_OR_RETURN(layer, QuantizeLayer(layer, group, bits, rounding));
    }
    return layer;
  }
};

// quantize: None, bits, (bits, group) or "BITS[:GROUP]".
void ParseQuantize(py::handle quantize, LayerTransform& t) {
  if (quantize.is_none()) return;
  if (py::isinstance<py::str>(quantize)) {
    const std::string spec = quantize.cast<std::string>();
    if (std::sscanf(spec.c_str(), "%d:%d", &t.bits, &t.group) < 1) ThrowInvalid("quantize must be BITS[:GROUP], got \"" + spec + "\"");
  } else if (py::isinstance<py::tuple>(quantize) && py::len(quantize) == 2) {
    t.bits = static_cast<int>(IntArg(quantize[py::int_(0)], "quantize bits", 0, 64));
    t.group = static_cast<int>(IntArg(quantize[py::int_(1)], "quantize group", 0, 1024));
  } else if (py::isinstance<py::int_>(quantize) && !py::isinstance<py::bool_>(quantize)) {
    t.bits = static_cast<int>(IntArg(quantize, "quantize bits", 0, 64));
  } else {
    ThrowInvalid("quantize must be None, bits, (bits, group) or \"BITS[:GROUP]\"");
  }
  if (!IsSupportedQuantization(t.bits, t.group)) {
    ThrowInvalid("quantize takes bits 2, 3, 4, 5, 6, 8 and group 32, 64, 128");
  }
}

void Convert(const std::filesystem::path& in_path, const std::filesystem::path& out_path, const py::object& compress,
             std::optional<std::string> codec, const py::object& integrity, std::optional<std::string> layout,
             const py::object& quantize,
             bool dequantize, bool gpu_rounding, std::optional<std::string> dtype, int threads) {
  const std::string in = UserPath(in_path), out = UserPath(out_path);
  // None keeps the input's digests (and their algorithm); else as save's.
  const bool integrity_asked = !integrity.is_none();
  const std::optional<DigestAlgorithm> digest = integrity_asked ? ParseIntegrity(integrity) : std::nullopt;
  LayerTransform transform;
  ParseQuantize(quantize, transform);
  if (dequantize && transform.bits != 0) ThrowInvalid("quantize and dequantize exclude each other");
  transform.dequantize = dequantize;
  if (gpu_rounding) transform.rounding = QuantizeOptions::Rounding::kGpu;
  if (dtype) {
    const DType d = ParseDTypeName(*dtype);
    if (!IsCastLayerDType(d)) ThrowInvalid("dtype must be F16, BF16 or F32");
    transform.dtype = d;
  }
  // Plain values with flags: GCC 12 misreports optional enums as uninitialised.
  const bool layout_asked = layout.has_value();
  const PromptCacheLayout to = layout_asked ? ParseLayoutName(*layout) : PromptCacheLayout::kMlxLm;
  const bool decompress = py::isinstance<py::bool_>(compress) && !compress.cast<bool>();
  if (decompress && codec) ThrowInvalid("codec applies to compressed output");
  const bool codec_asked = codec.has_value();
  const ZstdCodec codec_value = codec_asked ? ParseCodecName(*codec) : ZstdCodec::kZstd;
  // An explicit level, or the codec's default when compression is asked for.
  std::optional<int> level_asked;
  const bool default_level = (py::isinstance<py::bool_>(compress) && compress.cast<bool>()) ||
                             (compress.is_none() && codec_asked);
  if (py::isinstance<py::int_>(compress) && !py::isinstance<py::bool_>(compress)) {
    level_asked = ParseCompression(compress, codec_value);
  } else if (!compress.is_none() && !py::isinstance<py::bool_>(compress)) ThrowInvalid("compress must be None, a bool or a zstd level");

  Status s;
  {
    py::gil_scoped_release release;
    s = [&]() -> Status {
      KV_ASSIGN_OR_RETURN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), in));
      // Output container and layout: as asked, else the input's.
      const SavePromptCacheOptions same = SameFormatAs(info);
      const ZstdCodec out_codec = codec_asked ? codec_value : same.codec;
      std::optional<int> level = decompress ? std::nullopt : same.compression_level;
      if (level_asked) level = level_asked;
      if (default_level) level = DefaultZstdLevel(out_codec);
      const PromptCacheLayout out_layout = layout_asked ? to : same.layout;
      const bool rewrite = transform.any() || digest.has_value() || (integrity_asked && info.has_digests) ||
                           out_layout != info.layout;
      if (!rewrite) {
        TranscodeOptions t;
        t.compression_level = level;
        t.codec = out_codec;
        t.threads = threads;
        return TranscodePromptCacheFile(Env::Default(), in, out, t);
      }
      ConvertOptions c;
      c.output.layout = out_layout;
      c.output.integrity = !integrity_asked || digest.has_value();
      c.output.digest = digest.value_or(same.digest);
      c.output.compression_level = level;
      c.output.codec = out_codec;
      c.threads = threads;
      if (transform.any()) c.transform = [&](size_t, std::shared_ptr<Cache> layer) { return transform(layer); };
      return ConvertPromptCacheFile(Env::Default(), in, out, c);
    }();
  }
  ThrowIfError(s);
}

int64_t Trim(const std::filesystem::path& in_path, const std::filesystem::path& out_path, py::object n_arg,
             py::object keep_arg, int threads) {
  const std::string in = UserPath(in_path), out = UserPath(out_path);
  if (n_arg.is_none() == keep_arg.is_none()) ThrowInvalid("give exactly one of n and keep");
  constexpr int64_t kMaxTokens = std::numeric_limits<int64_t>::max();
  std::optional<int64_t> n, keep;
  if (!n_arg.is_none()) n = IntArg(n_arg, "n (tokens to trim)", 0, kMaxTokens);
  if (!keep_arg.is_none()) keep = IntArg(keep_arg, "keep (tokens to keep)", 0, kMaxTokens);
  auto trimmed = [&]() -> Result<int64_t> {
    py::gil_scoped_release release;
    KV_ASSIGN_OR_RETURN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), in));
    const int64_t drop = keep ? std::max<int64_t>(0, info.tokens().value_or(0) - *keep) : *n;
    ConvertOptions c;
    c.output = SameFormatAs(info);
    c.threads = threads;
    return TrimPromptCacheFile(Env::Default(), in, out, drop, c);
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
        py::arg("keep") = py::none(), py::arg("threads") = 0,
        R"doc(Drop the last n tokens of every layer (or keep only the first `keep`), as `kvtool trim`.

Give exactly one of n and keep. Writes dst atomically in src's format and returns
the number of tokens dropped (of the first layer). Raises InvalidArgumentError for
bad arguments and NotSupportedError for a layer that cannot be trimmed (nothing
is written then).)doc");
}

}  // namespace kvstore::python
