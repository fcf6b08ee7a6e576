// The temp files WriteFileAtomic has in progress on the POSIX Env, kept
// where a signal handler can remove them (RemoveTempFilesInProgress in
// include/kvstore/env.h).
//
// A fixed table of slots, each a path of at most kMaxTempPath bytes stored in
// atomics, guarded by a state and a generation counter (a seqlock): the
// handler copies a ready slot's path, checks that the slot was not released
// or reused meanwhile, and only then unlinks the copy. So it never unlinks a
// torn path, and what it unlinks is a name this process chose
// ("<path>.kvtmp-<pid>-<n>"), created or about to be. A path that does not
// fit, or a write when every slot is taken, is simply not registered: its
// temp file is then left to the next write of the same path (and, in a
// store, to its next Open), as after a SIGKILL.
#ifndef KVSTORE_LIBKVSTORE_IO_TEMP_FILE_REGISTRY_H_
#define KVSTORE_LIBKVSTORE_IO_TEMP_FILE_REGISTRY_H_

#include <cstddef>
#include <string>

namespace kvstore {

inline constexpr size_t kMaxTempPath = 4096;  // bytes, the terminating NUL included
inline constexpr size_t kTempFileSlots = 32;

// Registers `path` as a temp file in progress for as long as it lives.
class TempFileRegistration {
 public:
  explicit TempFileRegistration(const std::string& path);
  ~TempFileRegistration();
  TempFileRegistration(const TempFileRegistration&) = delete;
  TempFileRegistration& operator=(const TempFileRegistration&) = delete;

  bool registered() const { return slot_ >= 0; }

 private:
  int slot_ = -1;
};

}  // namespace kvstore

#endif  // KVSTORE_LIBKVSTORE_IO_TEMP_FILE_REGISTRY_H_
