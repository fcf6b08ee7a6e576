#!/usr/bin/env bash
# Release check: runs README's two quick-start commands, as root, in a fresh
# Debian 12 root made with debootstrap, so a package that this machine has but
# scripts/setup-deps.sh does not install fails here rather than on a user's
# machine.
#   scripts/fresh-debian-check.sh [--keep] [--no-shared] [WORK_DIR]
# It tests the committed tree (git archive HEAD), not uncommitted edits. The
# repository's ../shared (mlx-ref, fixtures) is copied beside it, as CI has it,
# unless --no-shared; tests that need it then skip, saying why. --keep leaves
# the root in WORK_DIR (a new directory; default: one under /var/tmp) for a look.
# Environment: KVSTORE_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Needs root (debootstrap, chroot, mounts) and the Debian mirror; about 20
# minutes on 2 cores, most of it the build and the tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
keep=0
shared=1
work=""
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --no-shared) shared=0 ;;
    -*) echo "usage: scripts/fresh-debian-check.sh [--keep] [--no-shared] [WORK_DIR]" >&2; exit 1 ;;
    *) work=$arg ;;
  esac
done
if [[ $(id -u) -ne 0 ]]; then
  echo "fresh-debian-check: needs root (debootstrap, chroot, mounts)" >&2
  exit 1
fi
mirror=${KVSTORE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if ! command -v debootstrap >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
if [[ -n $work ]]; then
  # Removed at the end unless --keep: only a directory this script makes.
  if [[ -e $work ]]; then echo "fresh-debian-check: $work exists; name a new directory" >&2; exit 1; fi
  mkdir -p "$work"
else
  work=$(mktemp -d /var/tmp/kvstore-fresh-debian.XXXXXX)
fi
target=$work/root
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if [[ $keep == 0 ]]; then rm -rf "$work"; else echo "fresh-debian-check: root kept in $target" >&2; fi
}
trap cleanup EXIT

echo "fresh-debian-check: debootstrap bookworm (minbase) into $target" >&2
debootstrap --variant=minbase bookworm "$target" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
cp /etc/resolv.conf "$target/etc/resolv.conf"
for fs in proc sys dev dev/pts; do
  mount --bind "/$fs" "$target/$fs"
  mounted+=("$target/$fs")
done
mount -t tmpfs tmpfs "$target/dev/shm" && mounted+=("$target/dev/shm")

# The tree as a fresh clone has it, with ../shared beside it as CI has it.
mkdir -p "$target/work/main"
git -C "$root" archive HEAD | tar -x -C "$target/work/main"
if [[ $shared == 1 && -d "$root/../shared" ]]; then
  cp -a "$root/../shared" "$target/work/shared"
fi

echo "fresh-debian-check: README's quick start in the new root" >&2
chroot "$target" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash -c 'cd /work/main && bash scripts/quickstart.sh && bash scripts/test.sh'
echo "fresh-debian-check: passed" >&2
