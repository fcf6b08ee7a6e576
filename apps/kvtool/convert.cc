// kvtool convert IN -o OUT: compression and integrity of a cache file.
//
// --compress / --decompress alone are byte-exact container transforms: the
// plain file inside the zstd container is the input byte for byte, so
// `convert --compress` then `--decompress` gives back the input. Anything
// that changes the content (--integrity, --no-integrity, --to) re-writes
// the cache through the library.
#include <cstdio>
#include <thread>

#include "apps/kvtool/kvtool.h"
#include "kvstore/kv_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "kvstore/zstd_seekable.h"

namespace kvtool {
namespace {

struct ConvertArgs {
  std::string in, out, to = "mlx-lm";
  std::string quantize;  // BITS[:GROUP]
  bool dequantize = false;
  bool gpu_rounding = false;
  std::string dtype;     // f16 | bf16 | f32
  std::optional<int> compress;
  bool compress_flag = false;
  bool decompress = false;
  bool integrity = false;
  bool no_integrity = false;
  bool quiet = false;
  int threads = 0;
};

// Streams the plain bytes of `in` (decompressing frame by frame when it is
// compressed) into `out`, optionally re-wrapping them in a new container.
// Memory: a few frames, never the whole file.
kvstore::Status TransformContainer(const std::string& in, const std::string& out, std::optional<int> level,
                                   int threads) {
  KV_ASSIGN_OR_RETURN(auto file, kvstore::Env::Default()->OpenReadable(in));
  const std::span<const std::byte> bytes = file->data();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return kvstore::WriteFileAtomic(kvstore::Env::Default(), out, [&](kvstore::WritableFile& f) -> kvstore::Status {
    std::unique_ptr<kvstore::ZstdSeekableWriter> writer;
    if (level) {
      kvstore::ZstdWriteOptions options;
      options.level = *level;
      options.threads = threads;
      writer = std::make_unique<kvstore::ZstdSeekableWriter>(&f, options);
    }
    bool first = true;
    auto emit = [&](std::span<const std::byte> chunk) -> kvstore::Status {
      if (!writer) return f.Append(chunk);
      if (first) {  // the safetensors header gets a frame of its own
        first = false;
        KV_ASSIGN_OR_RETURN(uint64_t n, kvstore::ParseSafetensorsHeaderSize(chunk, bytes.size()));
        if (8 + n <= chunk.size()) {
          KV_RETURN_IF_ERROR(writer->Append(chunk.subspan(0, 8 + n)));
          KV_RETURN_IF_ERROR(writer->EndFrame());
          return writer->Append(chunk.subspan(8 + n));
        }
      }
      return writer->Append(chunk);
    };
    if (!kvstore::IsZstdFrame(bytes)) {
      KV_RETURN_IF_ERROR(kvstore::ParseSafetensorsHeaderSize(bytes, bytes.size()).status());
      KV_RETURN_IF_ERROR(emit(bytes));
    } else {
      KV_ASSIGN_OR_RETURN(kvstore::ZstdSeekableReader reader, kvstore::ZstdSeekableReader::Open(bytes));
      const auto& frames = reader.frames();
      for (size_t i = 0; i < frames.size(); i += static_cast<size_t>(threads)) {
        const size_t end = std::min(frames.size(), i + static_cast<size_t>(threads));
        std::vector<std::vector<std::byte>> plain(end - i);
        std::vector<kvstore::Status> status(end - i);
        std::vector<std::thread> pool;
        for (size_t j = i; j < end; ++j) {
          pool.emplace_back([&, j] {
            plain[j - i].resize(frames[j].decompressed_size);
            status[j - i] = reader.Read(frames[j].decompressed_offset, plain[j - i]);
          });
        }
        for (auto& t : pool) t.join();
        for (size_t j = 0; j < plain.size(); ++j) {
          KV_RETURN_IF_ERROR(status[j]);
          KV_RETURN_IF_ERROR(emit(plain[j]));
        }
      }
    }
    return writer ? writer->Finish() : kvstore::Status::OK();
  });
}

// Converts every floating array of a state tree to `dtype`.
kvstore::Result<kvstore::CacheState> CastState(const kvstore::CacheState& s, kvstore::DType dtype) {
  if (s.is_array()) {
    if (!kvstore::IsFloating(s.array().dtype())) return s;
    KV_ASSIGN_OR_RETURN(kvstore::Array a, s.array().AsType(dtype));
    return kvstore::CacheState(std::move(a));
  }
  if (!s.is_list()) return s;
  kvstore::CacheState::List items;
  for (const auto& c : s.list()) {
    KV_ASSIGN_OR_RETURN(kvstore::CacheState x, CastState(c, dtype));
    items.push_back(std::move(x));
  }
  return kvstore::CacheState(std::move(items));
}

// Applies --quantize / --dequantize / --dtype to each layer.
kvstore::Status TransformLayers(const ConvertArgs& a, kvstore::PromptCache& cache) {
  std::optional<kvstore::DType> dtype;
  if (!a.dtype.empty()) {
    if (a.dtype == "f16") dtype = kvstore::DType::kF16;
    else if (a.dtype == "bf16") dtype = kvstore::DType::kBF16;
    else if (a.dtype == "f32") dtype = kvstore::DType::kF32;
    else return kvstore::Status::InvalidArgument("--dtype must be f16, bf16 or f32");
  }
  int bits = 0, group = 64;
  if (!a.quantize.empty()) {
    if (std::sscanf(a.quantize.c_str(), "%d:%d", &bits, &group) < 1 || !kvstore::IsSupportedQuantization(bits, group)) {
      return kvstore::Status::InvalidArgument("--quantize takes BITS[:GROUP] with bits 2,3,4,5,6,8 and group 32,64,128");
    }
  }
  for (auto& layer : cache) {
    if (a.dequantize && layer->class_name() == "QuantizedKVCache") {
      auto* q = static_cast<kvstore::QuantizedKVCache*>(layer.get());
      KV_ASSIGN_OR_RETURN(kvstore::CacheState st, q->State());
      kvstore::Array kv[2];
      for (int i = 0; i < 2; ++i) {
        kvstore::QuantizedArray qa{st[i][0].array(), st[i][1].array(), st[i][2].array()};
        KV_ASSIGN_OR_RETURN(kv[i], kvstore::Dequantize(qa, q->group_size(), q->bits()));
      }
      auto plain = std::make_shared<kvstore::KVCache>();
      KV_RETURN_IF_ERROR(plain->SetState(kvstore::CacheState({kv[0], kv[1]})));
      layer = plain;
    }
    if (dtype) {
      KV_ASSIGN_OR_RETURN(kvstore::CacheState st, layer->State());
      KV_ASSIGN_OR_RETURN(kvstore::CacheState cast, CastState(st, *dtype));
      KV_ASSIGN_OR_RETURN(auto rebuilt, kvstore::CacheFromState(layer->class_name(), cast, layer->meta_state()));
      layer = std::shared_ptr<kvstore::Cache>(std::move(rebuilt));
    }
    if (bits != 0 && layer->class_name() == "KVCache") {
      auto* kv = static_cast<kvstore::KVCache*>(layer.get());
      KV_ASSIGN_OR_RETURN(auto q, kv->ToQuantized(group, bits, a.gpu_rounding ? kvstore::QuantizeOptions::Rounding::kGpu
                                                                              : kvstore::QuantizeOptions::Rounding::kCpu));
      layer = std::shared_ptr<kvstore::Cache>(std::move(q));
    }
  }
  return kvstore::Status::OK();
}

int RunConvert(ConvertArgs a) {
  if (a.compress_flag && !a.compress) a.compress = 3;
  if (a.compress && a.decompress) return Fail(kExitUsage, "--compress and --decompress exclude each other");
  if (a.integrity && a.no_integrity) return Fail(kExitUsage, "--integrity and --no-integrity exclude each other");
  if (a.to == "mlx-swift-lm") return Fail(kExitUnsupported, "writing the mlx-swift-lm layout is not supported yet");
  if (a.to != "mlx-lm") return Fail(kExitUsage, "--to must be mlx-lm or mlx-swift-lm");
  auto info = kvstore::ReadPromptCacheInfo(kvstore::Env::Default(), a.in);
  if (!info.ok()) return Fail(info.status());
  const bool was_compressed = info->compression.has_value();
  const std::optional<int> level = a.compress ? a.compress : a.decompress ? std::nullopt
                                   : was_compressed ? std::optional<int>(3) : std::nullopt;
  const bool transform = !a.quantize.empty() || a.dequantize || !a.dtype.empty();
  const bool rewrite = transform || a.integrity || (a.no_integrity && info->has_digests) ||
                       info->layout != kvstore::PromptCacheLayout::kMlxLm;
  if (!a.quiet && !a.quantize.empty()) std::fprintf(stderr, "kvtool: note: quantizing to %s bits loses precision\n", a.quantize.c_str());
  if (!a.quiet && (a.dtype == "f16" || a.dtype == "bf16")) std::fprintf(stderr, "kvtool: note: converting to %s may round values\n", a.dtype.c_str());
  kvstore::Status s;
  if (!rewrite) {
    s = TransformContainer(a.in, a.out, level, a.threads);
  } else {
    kvstore::LoadPromptCacheOptions load;
    load.threads = a.threads;
    load.verify = info->has_digests;
    auto loaded = kvstore::LoadPromptCache(kvstore::Env::Default(), a.in, load);
    if (!loaded.ok()) return Fail(loaded.status());
    if (kvstore::Status t = TransformLayers(a, loaded->cache); !t.ok()) return Fail(t);
    kvstore::SavePromptCacheOptions save;
    save.integrity = !a.no_integrity;
    save.compression_level = level;
    save.threads = a.threads;
    s = kvstore::SavePromptCache(kvstore::Env::Default(), a.out, loaded->cache, loaded->user_metadata, save);
  }
  if (!s.ok()) return Fail(s);
  if (!a.quiet) {
    auto out = kvstore::Env::Default()->GetFileSize(a.out);
    std::fprintf(stderr, "kvtool: wrote %s (%s%s)\n", a.out.c_str(), out.ok() ? HumanBytes(*out).c_str() : "?",
                 level ? ", zstd" : "");
  }
  return kExitOk;
}

}  // namespace

Runner RegisterConvert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Compress, decompress or re-write a cache file");
  cmd->add_option("IN", args->in, "input prompt-cache file")->required();
  cmd->add_option("-o,--output", args->out, "output file (may equal IN)")->required();
  cmd->add_option("--compress", args->compress, "zstd container at LEVEL (default 3)")->expected(0, 1);
  cmd->add_flag("--decompress", args->decompress, "write a plain safetensors file");
  cmd->add_flag("--integrity", args->integrity, "re-write with SHA-256 digests");
  cmd->add_flag("--no-integrity", args->no_integrity, "re-write without digests");
  cmd->add_option("--to", args->to, "layout: mlx-lm (default) or mlx-swift-lm");
  cmd->add_option("--quantize", args->quantize, "KVCache layers -> QuantizedKVCache, BITS[:GROUP] (mlx-lm to_quantized)");
  cmd->add_flag("--gpu-rounding", args->gpu_rounding, "quantize with the Metal/CUDA rounding rule");
  cmd->add_flag("--dequantize", args->dequantize, "QuantizedKVCache layers -> KVCache");
  cmd->add_option("--dtype", args->dtype, "convert float tensors to f16, bf16 or f32");
  cmd->add_option("--threads", args->threads, "worker threads (0 = all cores)");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress or summary on stderr");
  cmd->callback([args, cmd] { args->compress_flag = cmd->count("--compress") > 0; });
  return [args, cmd] { return *cmd ? RunConvert(*args) : -1; };
}

}  // namespace kvtool
