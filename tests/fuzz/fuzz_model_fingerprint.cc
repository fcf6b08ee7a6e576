// ModelFingerprint::FromJson must never crash on any input; a fingerprint
// it accepts must give back its own canonical JSON, which parses to the
// same fingerprint.
#include <cstdlib>
#include <string_view>

#include "kvstore/model_fingerprint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kvstore::Result<kvstore::ModelFingerprint> fp = kvstore::ModelFingerprint::FromJson(text);
  if (!fp.ok()) return 0;
  kvstore::Result<kvstore::ModelFingerprint> again = kvstore::ModelFingerprint::FromJson(fp->json());
  if (!again.ok() || again->digest() != fp->digest() || !again->DifferenceFrom(*fp).empty()) std::abort();
  return 0;
}
