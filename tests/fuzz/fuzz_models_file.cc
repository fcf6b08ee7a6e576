// The models file (kvstore-models.json, ModelRegistry) comes from disk: any
// bytes there must never crash the registry, a fingerprint it serves must be
// the one of the model asked for, and what a process learns is served and
// written over a broken file.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <span>

#include "kvstore/env.h"
#include "kvstore/model_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<kvstore::Env> env = kvstore::NewMemEnv();
  if (!env->CreateDir("/d").ok() ||
      !kvstore::WriteStringAtomic(env.get(), "/d/kvstore-models.json", std::as_bytes(std::span(data, size))).ok()) {
    std::abort();
  }
  kvstore::ModelRegistry registry({.env = env.get(), .directory = "/d"});
  for (const char* id : {"fuzz", "m"}) {
    std::optional<kvstore::ModelFingerprint> found = registry.Find(id);
    if (found && found->model_id() != id) std::abort();
  }
  kvstore::Result<kvstore::ModelFingerprint> learned = kvstore::ModelFingerprint::FromJson(
      R"({"format":"kvstore-fingerprint/1","layers":[{"class":"KVCache","dtype":"F16","heads":2,"k_dim":8,"v_dim":8}],"model":"m"})");
  if (!learned.ok() || !registry.Remember(*learned).ok()) std::abort();
  kvstore::ModelRegistry restarted({.env = env.get(), .directory = "/d"});
  if (restarted.Find("m") != *learned) std::abort();
  return 0;
}
