#include "apps/common/secret.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kvstore/user_path.h"

namespace kvapps {

kvstore::Result<std::string> ResolveSharedSecret(std::string_view flag_secret, const std::string& secret_file) {
  using kvstore::Status;
  if (!flag_secret.empty() && !secret_file.empty()) {
    return Status::InvalidArgument("--secret and --secret-file: give one");
  }
  if (!flag_secret.empty()) return std::string(flag_secret);
  if (secret_file.empty()) {
    const char* env = std::getenv(std::string(kSharedSecretEnv).c_str());
    return std::string(env != nullptr ? env : "");
  }
  kvstore::Result<std::string> path = kvstore::ExpandUserPath(secret_file);
  if (!path.ok()) return path.status().WithPrefix("--secret-file");
  std::ifstream in(*path, std::ios::binary);
  if (!in.is_open()) return Status::IOError("cannot open --secret-file " + secret_file);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read --secret-file " + secret_file);
  std::string secret = text.str();
  if (secret.ends_with('\n')) secret.pop_back();
  if (secret.ends_with('\r')) secret.pop_back();
  if (secret.empty()) return Status::InvalidArgument("--secret-file " + secret_file + " is empty");
  return secret;
}

}  // namespace kvapps
