#!/usr/bin/env bash
# Fails when a test object file defines a function that the library also
# defines: the test binary would then run that copy instead of the library
# code it claims to test (a weak or duplicated definition wins the link).
#   no_library_copies.sh LIBKVSTORE_ARCHIVE OBJECT...
set -uo pipefail
lib=$1; shift
command -v nm > /dev/null || { echo "FAIL: nm not found"; exit 1; }
# Functions the library defines out of line ("T"); inline functions and
# template instances are weak in every object that uses them, so they do not count.
lib_symbols=$(nm --defined-only -g "$lib" 2> /dev/null | awk '$2 == "T" { print $3 }' | sort -u)
[[ -n $lib_symbols ]] || { echo "FAIL: no symbols read from $lib"; exit 1; }
failures=0 objects=0
for obj in "$@"; do
  objects=$((objects + 1))
  copies=$(nm --defined-only -g "$obj" | awk '$2 ~ /^[TtWw]$/ { print $3 }' | sort -u | comm -12 <(echo "$lib_symbols") -)
  if [[ -n $copies ]]; then
    echo "FAIL: $obj defines library functions:"
    c++filt <<< "$copies" | sed 's/^/  /'
    failures=$((failures + 1))
  fi
done
((objects > 0)) || { echo "FAIL: no object files given"; exit 1; }
if ((failures)); then exit 1; fi
echo "$objects test objects, none defines a library function"
