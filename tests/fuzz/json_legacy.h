// The previous hand-written JSON parser, the oracle of fuzz_json_diff.
#ifndef KVSTORE_TESTS_FUZZ_JSON_LEGACY_H_
#define KVSTORE_TESTS_FUZZ_JSON_LEGACY_H_

#include <string_view>

#include "kvstore/json.h"

namespace kvstore::legacy {

Result<Json> ParseJson(std::string_view text, const Json::ParseOptions& options);

}  // namespace kvstore::legacy

#endif  // KVSTORE_TESTS_FUZZ_JSON_LEGACY_H_
