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
#include "kvstore/zstd_seekable.h"

namespace kvtool {
namespace {

struct ConvertArgs {
  std::string in, out, to = "mlx-lm";
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
  const bool rewrite = a.integrity || (a.no_integrity && info->has_digests) ||
                       info->layout != kvstore::PromptCacheLayout::kMlxLm;
  kvstore::Status s;
  if (!rewrite) {
    s = TransformContainer(a.in, a.out, level, a.threads);
  } else {
    kvstore::LoadPromptCacheOptions load;
    load.threads = a.threads;
    load.verify = info->has_digests;
    auto loaded = kvstore::LoadPromptCache(kvstore::Env::Default(), a.in, load);
    if (!loaded.ok()) return Fail(loaded.status());
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
  cmd->add_option("--threads", args->threads, "worker threads (0 = all cores)");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress or summary on stderr");
  cmd->callback([args, cmd] { args->compress_flag = cmd->count("--compress") > 0; });
  return [args, cmd] { return *cmd ? RunConvert(*args) : -1; };
}

}  // namespace kvtool
