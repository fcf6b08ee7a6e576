// Shared plumbing of kvtool's subcommands: exit codes, error reporting and
// output helpers. Every subcommand is a thin client of the public library API.
#ifndef KVSTORE_APPS_KVTOOL_KVTOOL_H_
#define KVSTORE_APPS_KVTOOL_KVTOOL_H_

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kvstore/json.h"
#include "kvstore/prompt_cache_file.h"
#include "kvstore/status.h"

namespace kvtool {

// Exit codes (docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,
  kExitIo = 2,           // I/O error, file not found, access refused (Redis AUTH or ACL)
  kExitCorruption = 3,   // malformed file or failed verification
  kExitUnsupported = 4,  // a valid request we cannot do (unknown layout, untrimmable layer)
};

// The exit code for a library error.
int ExitCodeFor(const kvstore::Status& status);

// Prints "kvtool: <message>" to stderr and returns the exit code. The
// message is printed with the credentials of any URL in it redacted and its
// control characters escaped (TerminalText).
int Fail(const kvstore::Status& status);
int Fail(int code, std::string_view message);

// "1.5 MiB"
std::string HumanBytes(uint64_t bytes);

// How `verify` and `inspect --verify` end a verification: each digest
// mismatch on its own line, the library's DigestMismatch message (exit 3);
// no digests: the library's note and how to add them (exit 4); else kExitOk.
int FailVerification(const std::string& path, const kvstore::VerifyReport& report);

// `text` (bytes from a file or a store: hostile) safe to print to a
// terminal: well-formed UTF-8 of printable characters as it is; control
// characters (C0, DEL, C1), malformed bytes and '\' as \xNN. With
// `keep_lines` (messages), newlines, tabs and '\' stay.
std::string TerminalText(std::string_view text, bool keep_lines = false);

// The transform of every path option: a leading "~" expanded as a shell
// would (kvstore::ExpandUserPath), for the paths a shell leaves alone
// ("--output=~/x", quoted ones); a usage error when it cannot be.
CLI::Validator UserPath();

// `text` cut to at most `max_bytes` bytes, "..." included, at a character
// boundary (so a cut never leaves half a UTF-8 sequence to be escaped).
// REQUIRES: max_bytes >= 3.
std::string Abbreviated(std::string_view text, size_t max_bytes);

// Prints `value` to stdout, indented by 2, and a newline (--json output).
void PrintJson(const kvstore::Json& value);

// ---- usage.cc, signals.cc ----

// Sets kvtool's help layout on `app` (before the subcommands are added).
void SetUpUsage(CLI::App& app);
// Refuses a value that is empty (--kv-type "").
CLI::Validator NonEmpty();
// Usage errors found before CLI11 parses: an unknown command (with the
// commands and the closest one), "--compress 5" (the level goes after '=').
// The exit code when refused.
std::optional<int> CheckArguments(const CLI::App& app, int argc, char** argv);
// A CLI11 parse error as "kvtool: <message>" with where to find help; exit 1.
int ReportParseError(const CLI::App& app, const CLI::ParseError& e);
// SIGINT, SIGTERM, SIGHUP, SIGQUIT remove the temp files of writes in
// progress before kvtool dies of them; SIGXFSZ is ignored, so writing past a
// file-size limit fails with an error naming OUT.
void InstallSignalHandlers();

// --sync / --no-sync of the commands that write a prompt-cache file: how
// far the output survives a power loss (kvstore::Durability). Neither: it
// is synced only when it replaces an existing file (docs/cli.md).
struct SyncFlags {
  bool sync = false;
  bool no_sync = false;
};
void AddSyncFlags(CLI::App* cmd, SyncFlags* flags);
kvstore::Durability DurabilityOf(const SyncFlags& flags);

// A subcommand registers its options on `app` and returns the function that
// runs it (called only when the subcommand was selected).
using Runner = std::function<int()>;
Runner RegisterInspect(CLI::App& app);
Runner RegisterVerify(CLI::App& app);
Runner RegisterConvert(CLI::App& app);
Runner RegisterTrim(CLI::App& app);
Runner RegisterDiff(CLI::App& app);
Runner RegisterLs(CLI::App& app);

}  // namespace kvtool

#endif  // KVSTORE_APPS_KVTOOL_KVTOOL_H_
