// kvtool on a shared tier's store: `ls` and `inspect` given a redis://
// URL instead of a directory or file (docs/cli.md). ls.cc and inspect.cc
// call in here for such an argument.
#ifndef KVSTORE_APPS_KVTOOL_SHARED_H_
#define KVSTORE_APPS_KVTOOL_SHARED_H_

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace kvtool {

// True for "redis://...".
bool IsSharedTierUrl(const std::string& arg);

// The options the shared tier adds to a subcommand.
struct SharedArgs {
  std::string prefix = "kvstore:";  // --prefix
  std::string ns;                   // --namespace (ls)
  std::string key;                  // --key (inspect)
  // The seal's secret, which opens sealed values and descriptors: from
  // --secret (visible to other users in ps), --secret-file, or else
  // $KVSTORE_SHARED_SECRET.
  std::string secret;               // --secret
  std::string secret_file;          // --secret-file
};
std::shared_ptr<SharedArgs> AddSharedLsOptions(CLI::App* ls);
std::shared_ptr<SharedArgs> AddSharedInspectOptions(CLI::App* inspect);

// kvtool ls URL: the namespaces under the prefix, or with --namespace the
// chains of chunks in one.
int LsShared(const std::string& url, const SharedArgs& args, bool json);
// kvtool inspect URL --key KEY: one chunk from its header (a sealed one
// opened with the secret, else shown as sealed with its size); --verify
// reads it whole and checks it (a plain one by its digests, a sealed one by
// its GCM tag).
int InspectShared(const std::string& url, const SharedArgs& args, bool json, bool verify);

}  // namespace kvtool

#endif  // KVSTORE_APPS_KVTOOL_SHARED_H_
