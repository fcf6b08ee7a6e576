// Json::Parse must never crash on any input; what it accepts must dump and
// re-parse to an equal value.
#include <cstdlib>
#include <string_view>

#include "kvstore/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kvstore::Result<kvstore::Json> parsed = kvstore::Json::Parse(text);
  if (!parsed.ok()) return 0;
  kvstore::Result<kvstore::Json> again = kvstore::Json::Parse(parsed->Dump());
  if (!again.ok()) std::abort();
  // Doubles may print differently but must parse back to the same value.
  if (*again != *parsed) std::abort();
  return 0;
}
