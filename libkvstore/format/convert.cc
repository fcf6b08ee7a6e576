// ConvertPromptCacheFile (layer by layer through the writer) and
// TranscodePromptCacheFile (container changes, byte for byte).
#include <mutex>
#include <set>

#include "kvstore/prompt_cache_file.h"
#include "libkvstore/format/reader_impl.h"
#include "libkvstore/format/layout.h"
#include "libkvstore/format/writer.h"
#include "libkvstore/util/ordered_pipeline.h"

namespace kvstore {
namespace {

// The input tensors that layer `index` writes unchanged in `layout` (plain
// inputs): exactly the tensors the writer will emit, so a tensor the layout
// stores elsewhere (mlx-swift-lm keeps ArraysCache padding in the metadata)
// is not counted as copied.
std::set<size_t> CopiedTensors(const ReaderImpl& r, const Cache& layer, size_t index,
                               PromptCacheLayout layout) {
  std::set<size_t> copied;
  Result<FlatLayer> flat = FlattenLayer(layer, index, layout);
  if (!flat.ok()) return copied;
  for (const NamedArray& t : flat->tensors) {
    if (std::optional<size_t> i = r.ViewedTensor(t.array)) copied.insert(*i);
  }
  return copied;
}

}  // namespace

Status ConvertPromptCacheFile(Env* env, const std::string& in, const std::string& out,
                              const ConvertOptions& options) {
  PromptCacheReader::Options open;
  open.threads = options.threads;
  open.prefetch = true;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(env, in, open));
  const ReaderImpl& r = PromptCacheReaderInternals::Of(*reader);
  if (!reader->info().unsupported.empty()) return Status::NotSupported(in + ": " + reader->info().unsupported);
  const bool check = options.verify_input && r.parsed.has_digests;
  if (check) KV_RETURN_IF_ERROR(r.CheckHeaderDigest());
  KV_RETURN_IF_ERROR(reader->Validate());

  // Input bytes are checked once: compressed inputs when a layer is first
  // decompressed; plain inputs as they are copied (expected_digest below),
  // except the tensors a transform does not copy, checked when first read.
  std::vector<bool> checked(reader->num_layers(), false);
  LayerSource source = [&](size_t i) -> Result<std::shared_ptr<const Cache>> {
    const bool check_now = check && !checked[i];
    KV_ASSIGN_OR_RETURN(std::shared_ptr<Cache> layer, reader->ReadLayer(i, check_now && !r.plain));
    std::shared_ptr<Cache> result = layer;
    if (options.transform) {
      Result<std::shared_ptr<Cache>> t = options.transform(i, layer);
      if (!t.ok()) return t.status().WithPrefix("layer " + std::to_string(i));
      result = std::move(t).value();
      if (result == nullptr) return Status::InvalidArgument("layer " + std::to_string(i) + ": the transform returned no cache");
    }
    if (check_now && r.plain) {
      const std::set<size_t> copied = CopiedTensors(r, *result, i, options.output.layout);
      std::vector<size_t> rest;
      for (size_t t : r.parsed.layers[i].tensors) {
        if (!copied.count(t)) rest.push_back(t);
      }
      if (!rest.empty()) KV_RETURN_IF_ERROR(r.CheckTensors(rest, TensorArrays{}));  // hashed in the mapping
    }
    checked[i] = true;
    return std::shared_ptr<const Cache>(std::move(result));
  };
  WriterHooks hooks;
  if (check && r.plain) {
    hooks.expected_algorithm = r.algorithm;
    hooks.expected_digest = [&](const Array& a) -> std::optional<ExpectedDigest> {
      std::optional<size_t> i = r.ViewedTensor(a);
      if (!i) return std::nullopt;
      const std::string& name = r.header.tensors[*i].name;
      auto it = r.digests.find(name);
      // A tensor the digest list leaves out cannot be vouched for.
      return ExpectedDigest{it == r.digests.end() ? std::nullopt : std::optional(it->second), in, name};
    };
  }
  SavePromptCacheOptions save = options.output;
  if (save.threads == 0) save.threads = options.threads;
  return SaveLayers(env, out, reader->num_layers(), source, reader->info().user_metadata, save, hooks);
}

Result<int64_t> TrimPromptCacheFile(Env* env, const std::string& in, const std::string& out, int64_t n,
                                    const ConvertOptions& options) {
  if (n < 0) return Status::InvalidArgument("TrimPromptCacheFile: cannot trim " + std::to_string(n) + " tokens");
  std::optional<int64_t> trimmed;
  ConvertOptions trim = options;
  // Each call gets a fresh layer (views of the input), so trimming it again
  // when the writer asks for the layer a second time gives the same result.
  trim.transform = [&](size_t i, std::shared_ptr<Cache> layer) -> Result<std::shared_ptr<Cache>> {
    if (!layer->IsTrimmable()) return Status::NotSupported(std::string(layer->class_name()) + " is not trimmable");
    KV_ASSIGN_OR_RETURN(int64_t t, layer->Trim(n));
    if (i == 0) trimmed = t;  // trim_prompt_cache reports the first layer's count
    if (options.transform) return options.transform(i, std::move(layer));
    return layer;
  };
  KV_RETURN_IF_ERROR(ConvertPromptCacheFile(env, in, out, trim));
  return trimmed.value_or(0);
}

// ---- Transcoding ----

namespace {

constexpr size_t kPlainChunk = size_t{16} << 20;

// Frame buffers handed back and forth between the decompressing workers and
// the writer: reusing them saves an allocation, its page faults and a zero
// fill per frame.
class BufferPool {
 public:
  std::vector<std::byte> Take(size_t size) {
    std::vector<std::byte> b;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        b = std::move(free_.back());
        free_.pop_back();
      }
    }
    b.resize(size);
    return b;
  }
  void Give(std::vector<std::byte> b) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(b));
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<std::byte>> free_;
};

// Emits the plain file's bytes to `out` or into a compressed container whose
// first frame holds exactly the safetensors header.
class PlainSink {
 public:
  PlainSink(WritableFile& file, const TranscodeOptions& options, uint64_t header_bytes, uint64_t total)
      : file_(file), options_(options), header_bytes_(header_bytes), total_(total) {
    if (options.compression_level) {
      ZstdWriteOptions z;
      z.level = *options.compression_level;
      z.frame_size = options.frame_size;
      z.threads = options.threads;
      z.codec = options.codec;
      writer_ = std::make_unique<ZstdSeekableWriter>(&file, z);
    }
  }

  Status Emit(std::span<const std::byte> chunk) {
    while (!chunk.empty()) {
      // The header ends its frame exactly.
      size_t take = chunk.size();
      if (writer_ && done_ < header_bytes_) take = std::min<uint64_t>(take, header_bytes_ - done_);
      KV_RETURN_IF_ERROR(writer_ ? writer_->Append(chunk.first(take)) : file_.Append(chunk.first(take)));
      done_ += take;
      if (writer_ && done_ == header_bytes_) KV_RETURN_IF_ERROR(writer_->EndFrame());
      chunk = chunk.subspan(take);
    }
    if (options_.progress) options_.progress(done_, total_);
    return Status::OK();
  }

  // Bytes [at, at + n) of the plain file `source`: copied file to file
  // (WritableFile::AppendCopyOf, in the kernel where it can) when the
  // output is plain too.
  Status EmitCopy(const ReadableFile& source, uint64_t at, uint64_t n) {
    if (writer_) {
      source.WillRead(at, n);
      return Emit(source.data().subspan(at, n));
    }
    KV_RETURN_IF_ERROR(file_.AppendCopyOf(source, at, n));
    done_ += n;
    if (options_.progress) options_.progress(done_, total_);
    return Status::OK();
  }

  Status Finish() { return writer_ ? writer_->Finish() : Status::OK(); }

 private:
  WritableFile& file_;
  const TranscodeOptions& options_;
  const uint64_t header_bytes_, total_;
  uint64_t done_ = 0;
  std::unique_ptr<ZstdSeekableWriter> writer_;
};

}  // namespace

Status TranscodePromptCacheFile(Env* env, const std::string& in, const std::string& out,
                                const TranscodeOptions& options) {
  if (options.compression_level) KV_RETURN_IF_ERROR(CheckZstdLevel(*options.compression_level));
  // Opening validates the header, the layout, the layers' structure and
  // (compressed) the seek table.
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(env, in));
  // The bytes are copied as they are, but an impossible layer is not passed
  // on (a layer kvstore merely cannot load is).
  if (Status s = reader->Validate(); s.IsCorruption()) return s;
  const ReaderImpl& r = PromptCacheReaderInternals::Of(*reader);
  const uint64_t header_bytes = r.header.data_offset();
  const uint64_t total = header_bytes + r.header.data_size;
  const int threads = options.threads > 0 ? options.threads : DefaultThreads();
  return WriteFileAtomic(env, out, [&](WritableFile& file) -> Status {
    PlainSink sink(file, options, header_bytes, total);
    if (r.plain) {
      const std::span<const std::byte> bytes = r.file->data();
      for (size_t at = 0; at < bytes.size(); at += kPlainChunk) {
        KV_RETURN_IF_ERROR(sink.EmitCopy(*r.file, at, std::min(kPlainChunk, bytes.size() - at)));
      }
    } else {
      const ZstdSeekableReader& z = *r.zstd;
      BufferPool pool;
      KV_RETURN_IF_ERROR(OrderedPipeline<std::vector<std::byte>>(
          z.frames().size(), threads, static_cast<size_t>(threads) * 2,
          [&](size_t i) -> Result<std::vector<std::byte>> {
            std::vector<std::byte> plain = pool.Take(z.frames()[i].decompressed_size);
            KV_RETURN_IF_ERROR(z.ReadFrame(i, plain).WithPrefix(in));
            return plain;
          },
          [&](size_t, std::vector<std::byte>& plain) {
            Status s = sink.Emit(plain);
            pool.Give(std::move(plain));
            return s;
          }));
    }
    return sink.Finish();
  }, AtomicWriteOptions{.durability = options.durability});
}

}  // namespace kvstore
