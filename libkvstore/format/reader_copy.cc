// PromptCacheReader::SameHeader and VerifyCopy: checking what another reader
// (MLX's loader, reading the file by path) made of a file whose header this
// reader checked, so that a file replaced or rewritten in between is never
// served unchecked.
#include <algorithm>
#include <unordered_map>

#include "libkvstore/format/reader_impl.h"
#include "libkvstore/integrity/digest.h"
#include "libkvstore/util/parallel.h"

namespace kvstore {

namespace {

Metadata Sorted(Metadata m) {
  std::sort(m.begin(), m.end());
  return m;
}

}  // namespace

bool PromptCacheReader::SameHeader(const Metadata& metadata, std::span<const TensorCopy> tensors) const {
  const SafetensorsHeader& header = impl_->header;
  if (metadata.size() != header.metadata.size() || tensors.size() != header.tensors.size()) return false;
  if (Sorted(metadata) != Sorted(header.metadata)) return false;
  std::unordered_map<std::string_view, const TensorCopy*> by_name;
  for (const TensorCopy& t : tensors) by_name.emplace(t.name, &t);
  if (by_name.size() != tensors.size()) return false;  // a name twice
  return std::all_of(header.tensors.begin(), header.tensors.end(), [&](const TensorInfo& t) {
    auto it = by_name.find(t.name);
    return it != by_name.end() && it->second->dtype == t.dtype && it->second->shape == t.shape;
  });
}

Status PromptCacheReader::VerifyCopy(std::span<const TensorCopy> tensors, int threads) const {
  const Impl& r = *impl_;
  KV_RETURN_IF_ERROR(r.CheckHeaderDigest());
  std::vector<Digest> found(tensors.size());
  (void)ParallelFor(tensors.size(), threads, [&](size_t k) {
    found[k] = ComputeDigest(r.algorithm, tensors[k].bytes);
    return Status::OK();
  });
  std::unordered_map<std::string_view, size_t> copied;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorCopy& t = tensors[k];
    copied.emplace(t.name, k);
    auto it = r.digests.find(std::string(t.name));
    const uint64_t want = static_cast<uint64_t>(ShapeNumel(t.shape)) * DTypeSize(t.dtype);
    if (it == r.digests.end() || it->second != found[k] || t.bytes.size() != want) {
      const std::optional<Digest> expected = it == r.digests.end() ? std::nullopt : std::optional(it->second);
      return Status::Corruption(DigestMismatch{.tensor = std::string(t.name), .expected = expected, .found = found[k]}
                                    .Message(r.path));
    }
  }
  for (const auto& [name, digest] : r.digests) {
    if (!copied.count(name)) {
      return Status::Corruption(DigestMismatch{.tensor = name, .expected = digest, .found = {}}.Message(r.path));
    }
  }
  return Status::OK();
}

}  // namespace kvstore
