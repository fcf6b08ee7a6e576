// The names of temp files: "<target>.kvtmp-<pid>-<rest>", as WriteFileAtomic
// (include/kvstore/env.h) and PromptCacheStore's staged entries make them,
// so that a temp file of a process that is gone can be told from one in
// progress.
#ifndef KVSTORE_LIBKVSTORE_IO_TEMP_FILE_NAME_H_
#define KVSTORE_LIBKVSTORE_IO_TEMP_FILE_NAME_H_

#include <charconv>
#include <cstdint>
#include <string_view>

namespace kvstore {

inline constexpr std::string_view kTempMarker = ".kvtmp-";

// The pid of the first "<.kvtmp-><pid>-<rest>" in `name` (rest non-empty),
// with `*rest` set to <rest>; -1 when `name` has no such part.
inline int64_t TempFileWriterPid(std::string_view name, std::string_view* rest = nullptr) {
  const size_t at = name.find(kTempMarker);
  if (at == std::string_view::npos) return -1;
  name.remove_prefix(at + kTempMarker.size());
  int64_t pid = -1;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  const char* stop = name.data() + name.size();
  if (ec != std::errc() || end == name.data() || end == stop || *end != '-' || end + 1 == stop) return -1;
  if (rest != nullptr) *rest = std::string_view(end + 1, stop - (end + 1));
  return pid;
}

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_IO_TEMP_FILE_NAME_H_
