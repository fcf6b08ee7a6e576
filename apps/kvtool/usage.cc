// kvtool's usage errors: CLI11's errors and an unknown command, reported
// like every other error ("kvtool: <message>", exit 1) with what was
// expected, and the help layout of options whose value is attached
// (--compress[=LEVEL], --integrity[=ALG]).
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "apps/kvtool/kvtool.h"
#include "kvstore/digest.h"

namespace kvtool {
namespace {

// Prints an option whose text is "[=...]" with its value attached, as the
// usage lines write it: "--compress[=LEVEL]".
class AttachedValueFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_option_text().starts_with("[=")) return opt->get_option_text();
    return CLI::Formatter::make_option_opts(opt);
  }
};

std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

// Edit distance (insertions, deletions, substitutions), for suggestions.
size_t Distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

void SetUpUsage(CLI::App& app) { app.formatter(std::make_shared<AttachedValueFormatter>()); }

CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& value) { return value.empty() ? std::string("must not be empty") : ""; }, "");
}

namespace {

// True for "5", "-3": what --compress's level looks like.
bool LooksLikeLevel(std::string_view arg) {
  if (arg.starts_with("-")) arg.remove_prefix(1);
  return !arg.empty() && arg.find_first_not_of("0123456789") == std::string_view::npos;
}

bool LooksLikeDigestName(std::string_view arg) { return kvstore::DigestAlgorithmFromName(arg).has_value(); }

// Flags whose value is attached (--compress[=LEVEL], --integrity[=ALG]):
// they never take the next argument, which may be IN.
struct AttachedValueFlag {
  std::string_view flag;
  std::string_view value;  // what the value is called in the message
  bool (*looks_like_value)(std::string_view);
};
constexpr AttachedValueFlag kAttachedValueFlags[] = {{"--compress", "level", LooksLikeLevel},
                                                     {"--integrity", "algorithm", LooksLikeDigestName}};

}  // namespace

std::optional<int> CheckArguments(const CLI::App& app, int argc, char** argv) {
  // A value written after a space would be read as a file name (or refused
  // as an extra argument): say how to attach it.
  for (int i = 1; i + 1 < argc; ++i) {
    for (const AttachedValueFlag& f : kAttachedValueFlags) {
      if (std::string_view(argv[i]) != f.flag || !f.looks_like_value(argv[i + 1])) continue;
      return Fail(kExitUsage, std::string(f.flag) + " takes its " + std::string(f.value) + " after '=': " +
                                  std::string(f.flag) + "=" + argv[i + 1] +
                                  " (a separate argument would be read as a file)");
    }
  }
  // kvtool's own options (--help, --version) take no value, so the first
  // argument that is not an option names the command.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("-")) continue;
    const std::vector<std::string> names = CommandNames(app);
    if (std::find(names.begin(), names.end(), arg) != names.end()) return std::nullopt;
    std::string message = "unknown command '" + std::string(arg) + "'";
    auto closest = std::min_element(names.begin(), names.end(),
                                    [&](const std::string& a, const std::string& b) {
                                      return Distance(arg, a) < Distance(arg, b);
                                    });
    if (closest != names.end() && Distance(arg, *closest) <= 2)
      message += " (did you mean '" + *closest + "'?)";
    return Fail(kExitUsage, message + "; the commands are " + Join(names) + " (kvtool --help)");
  }
  return std::nullopt;
}

int ReportParseError(const CLI::App& app, const CLI::ParseError& e) {
  std::string message = e.what();
  if (e.get_name() == "RequiredError" && message.find("subcommand") != std::string::npos) {
    message = "a command is required: " + Join(CommandNames(app));
  }
  return Fail(kExitUsage,
              message + "\n(kvtool --help, or kvtool COMMAND --help, shows the options)");
}

}  // namespace kvtool
