// The shared tier's seal secret for a command-line tool (kvtool,
// prompt_cache_sim), never required on argv, where every user sees it
// through ps. Reading files and the environment is the tools' business; the
// library takes the secret as a string (SharedPromptCacheOptions::secret).
#ifndef KVSTORE_APPS_COMMON_SECRET_H_
#define KVSTORE_APPS_COMMON_SECRET_H_

#include <string>
#include <string_view>

#include "kvstore/status.h"

namespace kvapps {

inline constexpr std::string_view kSharedSecretEnv = "KVSTORE_SHARED_SECRET";

// `flag_secret` when given, else the content of `secret_file` ("~" expanded,
// kvstore::ExpandUserPath; one trailing newline dropped), else the environment variable KVSTORE_SHARED_SECRET,
// else "" (no seal). Both flags given, or an empty file: InvalidArgument;
// an unreadable file: IOError.
kvstore::Result<std::string> ResolveSharedSecret(std::string_view flag_secret, const std::string& secret_file);

}  // namespace kvapps

#endif  // KVSTORE_APPS_COMMON_SECRET_H_
