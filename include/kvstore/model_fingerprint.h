// ModelFingerprint: what makes two prompt caches interchangeable. A cache is
// only valid for the model that computed it, so every tier that reuses
// caches keys or checks them by a fingerprint of:
//   * the model id the server passes (a string naming weights, adapter, ...);
//   * the layer count;
//   * per layer (CacheList children included): the cache class, dtype, KV
//     heads, key and value head dims, quantization group size and bits,
//     RotatingKVCache window and keep sizes, ChunkedKVCache chunk size, and
//     for ArraysCache/MambaCache each slot's dtype and shape (batch axis
//     excluded).
// The batch size, offsets and token count are not part of it.
//
// A server declares its fingerprint with a ModelSpec (designated
// initialisers) or takes it from a cache its model produced (Of), e.g.
// after a one-token warm-up:
//
//   ModelSpec spec{.model_id = "llama-3.1-8b@main",
//                  .layers = std::vector<CacheSpec>(32, CacheSpec{
//                      .class_name = "KVCache", .dtype = DType::kBF16,
//                      .kv_heads = 8, .k_head_dim = 128, .v_head_dim = 128})};
//   Result<ModelFingerprint> fp = ModelFingerprint::Make(spec);
//
// The canonical form is compact JSON with sorted keys (docs/format.md §8.1);
// digest() is its SHA-256.
//
// Thread safety: a ModelFingerprint is an immutable value (cheap to copy,
// shares its state); every member may be called from many threads.
#ifndef KVSTORE_MODEL_FINGERPRINT_H_
#define KVSTORE_MODEL_FINGERPRINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/array.h"
#include "kvstore/cache.h"
#include "kvstore/cache_spec.h"
#include "kvstore/dtype.h"
#include "kvstore/sha256.h"
#include "kvstore/status.h"

namespace kvstore {

struct ModelSpec {
  std::string model_id{};
  std::vector<CacheSpec> layers{};
};

class ModelFingerprint {
 public:
  // Validates `spec`: a non-empty model id and layer list, known classes,
  // each with the fields its class needs (positive heads and dims, a
  // supported quantization, max_size >= 1 and 0 <= keep <= max_size, ...),
  // CacheList nesting <= 8. InvalidArgument naming the layer otherwise.
  static Result<ModelFingerprint> Make(ModelSpec spec);

  // The fingerprint of the model that produced `cache`. NotSupported when a
  // layer cannot tell its shapes (an empty cache, a None ArraysCache slot, a
  // ChunkedKVCache with chunk size None).
  static Result<ModelFingerprint> Of(std::string model_id, const PromptCache& cache);

  // Parses the canonical JSON (as json() returns it). The text is treated
  // as hostile: Corruption naming what is wrong.
  static Result<ModelFingerprint> FromJson(std::string_view json);

  const ModelSpec& spec() const;
  const std::string& model_id() const { return spec().model_id; }
  // Canonical compact JSON, keys sorted.
  const std::string& json() const;
  // SHA-256 of json().
  const Sha256Digest& digest() const;

  // The first difference from `other`, e.g. "layer 3 (RotatingKVCache):
  // max_size 4096 != 1024" (this first, then other); empty when equal.
  std::string DifferenceFrom(const ModelFingerprint& other) const;

  // OK when `cache` is what this model produces; InvalidArgument ("cache
  // does not match the model: layer 0 (KVCache): k_head_dim 64 != 128")
  // otherwise, or Of()'s error.
  Status Check(const PromptCache& cache) const;

  bool operator==(const ModelFingerprint& other) const { return digest() == other.digest(); }

 private:
  struct Impl;
  explicit ModelFingerprint(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The spec of one cache (one layer) as Of() derives it.
Result<CacheSpec> SpecOfCache(const Cache& cache);

}  // namespace kvstore

#endif  // KVSTORE_MODEL_FINGERPRINT_H_
