// Uses the installed public headers and library; prints "consumer ok".
#include <cstdio>

#include "kvstore/array.h"
#include "kvstore/float16.h"
#include "kvstore/json.h"
#include "kvstore/status.h"

int main() {
  kvstore::Array a = kvstore::Array::Zeros(kvstore::DType::kF16, {1, 2, 3, 4});
  kvstore::Result<kvstore::Array> f = a.Slice(2, 1, 3).AsType(kvstore::DType::kF32);
  // json.h is public; nlohmann-json, which implements it, is not exported.
  kvstore::Result<kvstore::Json> j = kvstore::Json::Parse(R"({"a":[1,2.5]})");
  if (!f.ok() || f->numel() != 16 || kvstore::FloatToHalf(1.0f) != 0x3C00 || !j.ok() ||
      j->Dump() != R"({"a":[1,2.5]})") {
    std::puts("consumer failed");
    return 1;
  }
  std::puts("consumer ok");
  return 0;
}
