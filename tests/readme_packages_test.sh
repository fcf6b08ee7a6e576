#!/usr/bin/env bash
# The README's quick start lists exactly the packages scripts/setup-deps.sh
# installs (the default set, then the KVSTORE_WITH_CLANG=1 extras).
#   readme_packages_test.sh SOURCE_DIR
set -uo pipefail
root=$(realpath "$1")
# setup-deps.sh's lists: packages=( ... ) read by bash itself (comments and
# all), and the words of the packages+=( ... ) line.
eval "$(sed -n '/^packages=(/,/^)/p' "$root/scripts/setup-deps.sh")"
script_main=$(printf '%s\n' "${packages[@]}" | sort)
script_clang=$(grep -o 'packages+=([^)]*)' "$root/scripts/setup-deps.sh" | sed 's/packages+=(\(.*\))/\1/' |
  tr ' ' '\n' | grep -v '^$' | sort)
# The backquoted words of the README's quick-start sentence: the first
# quoted list after "setup-deps.sh", then the one before "with KVSTORE_WITH_CLANG=1".
readme=$(tr '\n' ' ' < "$root/README.md" | sed 's/  */ /g')
main=$(sed -n 's/.*Debian packages of `scripts\/setup-deps.sh` that are missing: `\([^`]*\)`.*/\1/p' <<< "$readme" |
  tr ' ' '\n' | grep -v '^$' | sort)
clang=$(sed -n 's/.*(and `\([^`]*\)` with `KVSTORE_WITH_CLANG=1`.*/\1/p' <<< "$readme" | tr ' ' '\n' | grep -v '^$' | sort)
failures=0
[[ -n $main ]] || { echo "FAIL: README.md has no quick-start package list"; failures=1; }
((${#packages[@]} >= 10)) || { echo "FAIL: found ${#packages[@]} packages in setup-deps.sh"; failures=1; }
diff <(echo "$script_main") <(echo "$main") ||
  { echo "FAIL: README's packages (>) differ from setup-deps.sh's (<)"; failures=1; }
diff <(echo "$script_clang") <(echo "$clang") ||
  { echo "FAIL: README's clang packages (>) differ from setup-deps.sh's (<)"; failures=1; }
((failures)) && exit 1
echo "README lists the $(wc -l <<< "$main") + $(wc -l <<< "$clang") packages setup-deps.sh installs"
