// Shared helpers of the llama.cpp tests: the fixture cases of
// fixtures/llama.cpp (found by walking the folder and checked against its
// manifest), their expected.json, and decoding ggsq data to floats.
#ifndef KVSTORE_TESTS_LLAMA_CPP_TESTUTIL_H_
#define KVSTORE_TESTS_LLAMA_CPP_TESTUTIL_H_

#include <string>
#include <vector>

#include "kvstore/json.h"
#include "kvstore/llama_state.h"

namespace kvstore::testing {

// One llama.cpp-written file of a case and its entry in
// expected.json["llama_cpp_files"].
struct LlamaFixtureFile {
  std::string name;  // "seq_fa1.ggsq"
  std::string path;
  Json expected;
};

struct LlamaFixtureCase {
  std::string name;  // "llama_f32_d16"
  std::string dir;
  Json expected;  // the whole expected.json
  std::vector<LlamaFixtureFile> files;

  std::string Path(const std::string& relative) const { return dir + "/" + relative; }
};

// Every case folder under fixtures/llama.cpp, in name order; each file named
// in its expected.json. Fails the test (ADD_FAILURE) when a listed file is
// missing or expected.json is unreadable.
std::vector<LlamaFixtureCase> LlamaFixtureCases();

// The number of cases fixtures/llama.cpp/manifest.json lists.
size_t LlamaManifestCaseCount();

// Layer `layer`'s K (value false) or V of `stream` as floats in [cell][element]
// order (a transposed V is transposed back). `bytes` is the parsed file.
std::vector<float> LlamaBlockFloats(std::span<const std::byte> bytes, const LlamaState& state, size_t stream,
                                    size_t layer, bool value);

// max |a - b|; +inf when the sizes differ.
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

// The elements of a float array as F32 values, row-major.
std::vector<float> ArrayFloats(const Array& a);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_LLAMA_CPP_TESTUTIL_H_
