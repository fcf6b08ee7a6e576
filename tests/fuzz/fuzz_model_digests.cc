// The model digests cache file (ModelContentDigests) comes from disk: any
// bytes there must never crash the identity, and a model is still named.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "kvstore/env.h"
#include "kvstore/model_identity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  const std::string weights = "weights";
  if (!kvstore::WriteStringAtomic(env.get(), "/m/model.safetensors", std::as_bytes(std::span(weights))).ok() ||
      !kvstore::WriteStringAtomic(env.get(), "/c.json", std::as_bytes(std::span(data, size))).ok()) {
    std::abort();
  }
  kvstore::ModelContentDigests digests(env.get(), "/c.json");
  kvstore::Result<std::string> id = digests.Of("/m");
  if (!id.ok() || !id->starts_with("sha256:") || id->size() != 7 + 64) std::abort();
  return 0;
}
