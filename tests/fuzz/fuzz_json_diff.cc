// Differential fuzz: Json::Parse against the previous hand-written parser.
// Both must accept the same texts and build equal values. The first byte
// picks the options (duplicate keys allowed or not, depth limit). With
// JSON_DIFF_OFFSETS=1 in the environment, error offsets must agree too.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kvstore/json.h"
#include "tests/fuzz/json_legacy.h"

namespace {

size_t ErrorOffset(const kvstore::Status& s) {
  const std::string m(s.message());
  const size_t at = m.rfind(" at byte ");
  return at == std::string::npos ? size_t(-1) : std::strtoull(m.c_str() + at + 9, nullptr, 10);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  kvstore::Json::ParseOptions options;
  options.reject_duplicate_keys = (data[0] & 1) == 0;
  if (data[0] & 0x80) options.max_depth = (data[0] >> 1) & 7;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  kvstore::Result<kvstore::Json> ours = kvstore::Json::Parse(text, options);
  kvstore::Result<kvstore::Json> old = kvstore::legacy::ParseJson(text, options);
  if (ours.ok() != old.ok()) {
    std::fprintf(stderr, "accept differs: new %s / old %s\n", ours.status().ToString().c_str(),
                 old.status().ToString().c_str());
    std::abort();
  }
  if (ours.ok()) {
    if (*ours != *old) {
      std::fprintf(stderr, "values differ: new %s / old %s\n", ours->Dump().c_str(),
                   old->Dump().c_str());
      std::abort();
    }
    return 0;
  }
  static const bool check_offsets = std::getenv("JSON_DIFF_OFFSETS") != nullptr;
  if (check_offsets && ErrorOffset(ours.status()) != ErrorOffset(old.status())) {
    std::fprintf(stderr, "offsets differ: new %s / old %s\n", ours.status().ToString().c_str(),
                 old.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
