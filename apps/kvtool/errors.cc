#include <cstdio>
#include <iostream>

#include "apps/kvtool/kvtool.h"

namespace kvtool {

int ExitCodeFor(const kvstore::Status& status) {
  using kvstore::StatusCode;
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kNotFound:
    case StatusCode::kIOError: return kExitIo;
    case StatusCode::kCorruption:
    case StatusCode::kResourceExhausted: return kExitCorruption;
    case StatusCode::kNotSupported:
    case StatusCode::kFailedPrecondition: return kExitUnsupported;
    default: return kExitIo;
  }
}

int Fail(int code, std::string_view message) {
  std::fprintf(stderr, "kvtool: %.*s\n", static_cast<int>(message.size()), message.data());
  return code;
}

int Fail(const kvstore::Status& status) { return Fail(ExitCodeFor(status), status.message()); }

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace kvtool

namespace kvtool {

void PrintJson(const kvstore::Json& value) {
  kvstore::Json::DumpOptions pretty;
  pretty.indent = 2;
  std::cout << value.Dump(pretty) << "\n";
}

}  // namespace kvtool
