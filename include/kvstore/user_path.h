// Paths as a person types them. A shell expands "~" before a program sees
// it, but not inside quotes, after "--flag=", in a config file or in a
// Python string, where "~/.cache/kv" would otherwise name a directory called
// "~" in the working directory. Every path a user gives kvstore (kvtool's
// paths, the Python package's, a store's directory, a secret file) goes
// through ExpandUserPath first.
#ifndef KVSTORE_USER_PATH_H_
#define KVSTORE_USER_PATH_H_

#include <string>
#include <string_view>

#include "kvstore/status.h"

namespace kvstore {

// `path` with a leading "~" expanded as POSIX shells do: "~" and "~/rest" are
// the home directory ($HOME, else the password database's entry for the
// user id), "~name" and "~name/rest" the home of user `name`. Other paths are
// returned unchanged ("a/~b" included). InvalidArgument, naming the path,
// when the home directory is unknown (no $HOME and no password entry, or no
// user `name`). Thread-safe.
Result<std::string> ExpandUserPath(std::string_view path);

}  // namespace kvstore

#endif  // KVSTORE_USER_PATH_H_
