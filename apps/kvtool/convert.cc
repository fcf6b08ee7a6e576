// kvtool convert IN -o OUT: compression and integrity of a cache file.
//
// --compress / --decompress alone are byte-exact container transforms: the
// plain file inside the zstd container is the input byte for byte, so
// `convert --compress` then `--decompress` gives back the input. Anything
// that changes the content (--integrity, --no-integrity, --to) re-writes
// the cache through the library.
#include <cstdio>

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

// Decompresses `in` (if compressed) into the exact plain bytes.
kvstore::Result<std::vector<std::byte>> PlainBytes(const std::string& path, bool* was_compressed) {
  KV_ASSIGN_OR_RETURN(auto file, kvstore::Env::Default()->OpenReadable(path));
  *was_compressed = kvstore::IsZstdFrame(file->data());
  if (!*was_compressed) return std::vector<std::byte>(file->data().begin(), file->data().end());
  KV_ASSIGN_OR_RETURN(kvstore::ZstdSeekableReader reader, kvstore::ZstdSeekableReader::Open(file->data()));
  std::vector<std::byte> out(reader.decompressed_size());
  KV_RETURN_IF_ERROR(reader.ReadAll(out));
  return out;
}

kvstore::Status WriteContainer(const std::string& out, std::span<const std::byte> plain,
                               std::optional<int> level, int threads) {
  return kvstore::WriteFileAtomic(kvstore::Env::Default(), out, [&](kvstore::WritableFile& f) -> kvstore::Status {
    if (!level) return f.Append(plain);
    // Validate the input first so we never wrap garbage.
    KV_ASSIGN_OR_RETURN(uint64_t n, kvstore::ParseSafetensorsHeaderSize(plain, plain.size()));
    kvstore::ZstdWriteOptions options;
    options.level = *level;
    options.threads = threads;
    kvstore::ZstdSeekableWriter writer(&f, options);
    KV_RETURN_IF_ERROR(writer.Append(plain.subspan(0, 8 + n)));
    KV_RETURN_IF_ERROR(writer.EndFrame());
    KV_RETURN_IF_ERROR(writer.Append(plain.subspan(8 + n)));
    return writer.Finish();
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
    bool compressed = false;
    auto plain = PlainBytes(a.in, &compressed);
    if (!plain.ok()) return Fail(plain.status());
    s = WriteContainer(a.out, *plain, level, a.threads);
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
