#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds the dsec-vmm Linux guest kernel: `vmlinux` (ELF with the PVH note,
# for dsec-vmm) and `bzImage` (Linux boot protocol, for QEMU), configured by
# guest-kernel/config/dsec-microvm.config on top of allnoconfig.
#
# Usage: tools/build-guest-kernel.sh [KERNEL_TREE_OR_TARBALL]
#   default source: /usr/src/linux-source-6.1.tar.xz (Debian linux-source-6.1)
#
# Output: ${DSEC_CACHE_DIR:-$HOME/.cache/dsec-vmm}/guest-kernel/<hash>/ with
# vmlinux, bzImage, .config, kernelversion and kernelrelease; <hash> covers
# the fragment, this script and the source (tarball sha256, or a tree's
# `make kernelversion` and path). `guest-kernel/current` points at the last
# result. The directory is the last line on stdout; progress goes to stderr.
# A cached result returns at once; concurrent runs build once (flock).
set -euo pipefail

die() { echo "build-guest-kernel: error: $*" >&2; exit 1; }
say() { echo "build-guest-kernel: $*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
script="$repo/tools/$(basename "${BASH_SOURCE[0]}")"
fragment="$repo/guest-kernel/config/dsec-microvm.config"
default_source=/usr/src/linux-source-6.1.tar.xz
source=${1:-$default_source}
cache=${DSEC_CACHE_DIR:-${HOME:?set HOME or DSEC_CACHE_DIR}/.cache/dsec-vmm}/guest-kernel

[ -f "$fragment" ] || die "config fragment $fragment not found"
if [ ! -e "$source" ]; then
  if [ "$source" = "$default_source" ]; then
    die "kernel source $source not found: install Debian's linux-source-6.1 (tools/setup.sh does) or pass a kernel tree or tarball"
  fi
  die "kernel source $source not found"
fi
source=$(realpath "$source")
mkdir -p "$cache/.src-sha256"

# Identity of the source. A tarball's sha256 is remembered per (path, size,
# mtime, inode) so that a cache hit does not hash 140 MB again.
if [ -d "$source" ]; then
  [ -f "$source/Makefile" ] && [ -f "$source/Kconfig" ] || die "$source is not a kernel tree (no Makefile/Kconfig)"
  kind=tree
  source_id="tree $(make -s -C "$source" kernelversion 2>/dev/null) $source" ||
    die "cannot read the kernel version of $source"
else
  kind=tarball
  stamp=$(stat -L -c '%s %Y %i' "$source")
  key=$(printf '%s\n%s\n' "$source" "$stamp" | sha256sum | cut -c1-64)
  if [ -f "$cache/.src-sha256/$key" ]; then
    source_sha=$(cat "$cache/.src-sha256/$key")
  else
    say "hashing $source"
    source_sha=$(sha256sum "$source" | cut -c1-64)
    echo "$source_sha" > "$cache/.src-sha256/$key.$$"
    mv -f "$cache/.src-sha256/$key.$$" "$cache/.src-sha256/$key"
  fi
  source_id="tarball $source_sha"
fi

hash=$({
  printf 'fragment\n'; cat "$fragment"
  printf 'script\n'; cat "$script"
  printf 'source\n%s\n' "$source_id"
} | sha256sum | cut -c1-64)
out="$cache/$hash"

publish() {
  ln -sfn "$hash" "$cache/.current.$$"
  mv -Tf "$cache/.current.$$" "$cache/current"
  echo "$out"
}

if [ -f "$out/vmlinux" ] && [ -f "$out/bzImage" ]; then
  publish
  exit 0
fi

exec 9> "$cache/.lock"
if ! flock -n 9; then
  say "another build holds $cache/.lock; waiting for it"
  flock 9
fi
if [ -f "$out/vmlinux" ] && [ -f "$out/bzImage" ]; then
  publish
  exit 0
fi

for tool in make gcc flex bison bc perl tar xz; do
  command -v "$tool" > /dev/null || die "$tool not found: run tools/setup.sh (packages build-essential flex bison bc xz-utils)"
done
[ -f /usr/include/gelf.h ] || die "libelf headers not found (objtool needs them): apt-get install libelf-dev"

# Deleting an extracted tree (80k files) takes minutes on a busy disk, so
# trees are renamed to .trash.* and deleted in the background, detached from
# the lock and from our stdout (callers read it with $(...)).
discard() {
  local trash
  trash=$(mktemp -u "$cache/.trash.XXXXXX")
  mv -T "$1" "$trash" 2> /dev/null || return 0
  nohup rm -rf "$trash" < /dev/null > /dev/null 2>&1 9>&- &
}
# We hold the lock: a .build.* here is from a run that was killed, a
# .trash.* from a background delete that was (or still runs: a second rm
# of the same tree is harmless).
for stale in "$cache"/.build.* "$cache"/.trash.*; do
  if [ -e "$stale" ]; then
    nohup rm -rf "$stale" < /dev/null > /dev/null 2>&1 9>&- &
  fi
done
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'discard "$tmp"' EXIT
start=$(date +%s)

if [ "$kind" = tarball ]; then
  say "extracting $source"
  mkdir "$tmp/src"
  tar -xf "$source" -C "$tmp/src" --strip-components=1 || die "cannot extract $source"
  src="$tmp/src"
else
  src="$source"
  if [ -f "$src/.config" ] || [ -d "$src/include/config" ]; then
    die "$src has been configured in place; out-of-tree builds need a clean tree (make -C $src mrproper)"
  fi
fi
obj="$tmp/obj"
mkdir "$obj"
# Fixed user and host in the version banner: the build machine is no
# property of the kernel.
kmake() { make -C "$src" O="$obj" KBUILD_BUILD_USER=dsec KBUILD_BUILD_HOST=dsec-vmm "$@"; }

say "configuring (allnoconfig + $(basename "$fragment"))"
KCONFIG_ALLCONFIG="$fragment" kmake -s allnoconfig > "$tmp/config.log" 2>&1 &&
  kmake -s olddefconfig >> "$tmp/config.log" 2>&1 || {
    cat "$tmp/config.log" >&2
    die "kernel configuration failed"
  }

# Every option of the fragment must survive olddefconfig; one that was
# dropped has a missing dependency the fragment must name too.
dropped=()
while IFS= read -r line; do
  if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
    name=${BASH_REMATCH[1]}
    if ! grep -qxF -- "$line" "$obj/.config"; then
      got=$(grep -E "^$name=|^# $name is not set" "$obj/.config" || true)
      dropped+=("$name (wanted ${BASH_REMATCH[2]}, got: ${got:-absent})")
    fi
  elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set$ ]]; then
    name=${BASH_REMATCH[1]}
    if got=$(grep -E "^$name=" "$obj/.config"); then
      dropped+=("$name (wanted unset, got: $got)")
    fi
  fi
done < "$fragment"
if [ "${#dropped[@]}" -gt 0 ]; then
  printf '  %s\n' "${dropped[@]}" >&2
  die "${#dropped[@]} option(s) of $(basename "$fragment") did not survive olddefconfig (missing dependencies)"
fi

jobs=$(nproc)
say "building vmlinux and bzImage with make -j$jobs"
set +e
kmake -j"$jobs" vmlinux bzImage 2>&1 | tee "$tmp/build.log" |
  awk -v t0="$start" '/^  [A-Z]/ { n++; if (n % 500 == 0) {
      printf "build-guest-kernel: %d steps, %ds, at %s\n", n, systime() - t0, $2 > "/dev/stderr"; fflush("/dev/stderr") } }'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  grep -E -B2 -A8 'error|Error' "$tmp/build.log" | tail -40 >&2 || tail -40 "$tmp/build.log" >&2
  cp "$tmp/build.log" "$cache/failed-build.log"
  die "kernel build failed (make exit $status); full log: $cache/failed-build.log"
fi

mkdir "$tmp/out"
cp "$obj/vmlinux" "$tmp/out/vmlinux"
cp "$obj/arch/x86/boot/bzImage" "$tmp/out/bzImage"
cp "$obj/.config" "$tmp/out/.config"
kmake -s kernelversion > "$tmp/out/kernelversion"
kmake -s kernelrelease > "$tmp/out/kernelrelease"
printf 'source: %s\nbuild_seconds: %d\n' "$source_id" $(( $(date +%s) - start )) > "$tmp/out/build-info"
rm -rf "$out"  # a partial result (vmlinux or bzImage missing)
mv -T "$tmp/out" "$out"
say "built $(cat "$out/kernelrelease") in $(( $(date +%s) - start ))s: vmlinux $(stat -c %s "$out/vmlinux") bytes, bzImage $(stat -c %s "$out/bzImage") bytes"
publish
