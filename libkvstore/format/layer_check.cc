// Header-only validation of every layer (docs/format.md §5.8): CheckLayers
// at Open, PromptCacheReader::Validate and what ReadLayer refuses up front.
//
// Each layer is built by the load path itself (BuildLayer: the classes'
// restore rules, CacheFromState) over placeholder arrays that have the
// header's dtypes and shapes, so a layer is refused for exactly the reasons
// a load refuses it, without a tensor byte being read. Only checks that
// depend on tensor values (a batch cache's offsets fitting int32) are left
// to the load.
#include <sys/mman.h>

#include <algorithm>

#include "libkvstore/format/layout.h"
#include "libkvstore/format/reader_impl.h"
#include "libkvstore/util/platform_config.h"

namespace kvstore {
namespace {

// Read-only zeros backing every placeholder: one private anonymous mapping
// whose pages cost nothing unless read (only the batch caches read theirs,
// a few bytes of offsets); MAP_NORESERVE, where the system has it, reserves
// no swap for them.
Result<std::shared_ptr<Storage>> ZeroStorage(uint64_t size) {
  size = std::max<uint64_t>(size, 1);
#if KVSTORE_HAVE_MAP_NORESERVE
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#else
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
#endif
  void* p = mmap(nullptr, size, PROT_READ, kFlags, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted("no address space for " + std::to_string(size) +
                                     " bytes of placeholder tensors to check the layers");
  }
  std::shared_ptr<const void> owner(p, [size](const void* q) { munmap(const_cast<void*>(q), size); });
  return Storage::WrapReadOnly(static_cast<const std::byte*>(p), size, std::move(owner));
}

// The offsets of a layer built from its header (0.32 stores them as
// scalars, so only the built cache knows them), children included.
void NoteOffsets(ParsedLayer& layer, const Cache& cache) {
  layer.built_offset = cache.offset();
  const auto children = cache.children();
  for (size_t c = 0; c < layer.children.size() && c < children.size(); ++c) NoteOffsets(layer.children[c], *children[c]);
}

}  // namespace

Status FileError(const Status& build_error) {
  if (build_error.code() == StatusCode::kInvalidArgument) {
    return Status::Corruption(build_error.message());
  }
  if (build_error.code() == StatusCode::kNotFound) return Status::NotSupported(build_error.message());
  return build_error;
}

Status CheckLayers(const SafetensorsHeader& header, std::vector<ParsedLayer>& layers) {
  uint64_t largest = 0;
  for (const TensorInfo& t : header.tensors) largest = std::max<uint64_t>(largest, t.nbytes());
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Storage> zeros, ZeroStorage(largest));
  for (ParsedLayer& layer : layers) {
    if (!layer.unsupported.ok()) continue;  // already known not to load
    TensorArrays placeholders;
    for (size_t t : layer.tensors) {
      placeholders[t] = Array::FromStorage(header.tensors[t].dtype, header.tensors[t].shape, zeros, 0);
    }
    Result<std::unique_ptr<Cache>> built = BuildLayer(layer, placeholders);
    if (!built.ok()) {
      layer.problem = FileError(built.status());
    } else if (layer.full_state) {
      NoteOffsets(layer, **built);
    }
  }
  return Status::OK();
}

std::string ReaderImpl::LayerWhere(size_t index) const {
  return path + ": layer " + std::to_string(index) + " (" + parsed.layers[index].stored_class + ")";
}

Status ReaderImpl::LayerProblem(size_t index) const {
  const ParsedLayer& layer = parsed.layers[index];
  if (!layer.unsupported.ok()) {
    return Status::NotSupported(LayerWhere(index) + ": " + std::string(layer.unsupported.message()));
  }
  return layer.problem.WithPrefix(LayerWhere(index));
}

Status PromptCacheReader::Validate() const {
  const Impl& r = *impl_;
  // Impossible layers first: a broken file is reported as broken even when
  // it or another layer is merely unsupported.
  for (size_t i = 0; i < r.parsed.layers.size(); ++i) {
    if (r.parsed.layers[i].problem.IsCorruption()) return r.LayerProblem(i);
  }
  KV_RETURN_IF_ERROR(r.parsed.unsupported.WithPrefix(r.path));
  for (size_t i = 0; i < r.parsed.layers.size(); ++i) KV_RETURN_IF_ERROR(r.LayerProblem(i));
  return Status::OK();
}

}  // namespace kvstore
