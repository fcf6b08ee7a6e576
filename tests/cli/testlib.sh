# Sourced by the CLI tests: a scratch directory $tmp removed at exit,
# failures counted by fail, expect_exit for one run of $kvtool, and finish.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_exit() {  # expect_exit CODE MESSAGE_SUBSTRING -- args...: runs $kvtool args
  local want=$1 msg=$2; shift 3
  local out rc
  out=$("$kvtool" "$@" 2>&1); rc=$?
  [[ $rc == "$want" ]] || fail "kvtool $* exited $rc, want $want: $out"
  [[ -z $msg || $out == *"$msg"* ]] || fail "kvtool $* printed '$out', want '$msg'"
}
finish() {  # finish WHAT: exit 1 after failures, else say WHAT passed
  if ((failures)); then echo "$failures failures"; exit 1; fi
  echo "$1 passed"
}
