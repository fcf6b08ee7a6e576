// Shared plumbing of kvtool's subcommands: exit codes, error reporting and
// output helpers. Every subcommand is a thin client of the public library API.
#ifndef KVSTORE_APPS_KVTOOL_KVTOOL_H_
#define KVSTORE_APPS_KVTOOL_KVTOOL_H_

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
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

// `text` (bytes from a file or a store: hostile) safe to print to a
// terminal: well-formed UTF-8 of printable characters as it is; control
// characters (C0, DEL, C1), malformed bytes and '\' as \xNN. With
// `keep_lines` (messages), newlines, tabs and '\' stay.
std::string TerminalText(std::string_view text, bool keep_lines = false);

// Prints `value` to stdout, indented by 2, and a newline (--json output).
void PrintJson(const kvstore::Json& value);

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
