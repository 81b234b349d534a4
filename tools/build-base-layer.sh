#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Debian base layer, and optionally toolkit layers on top of it,
# into the dsec-vmm layer store.
#
#   tools/build-base-layer.sh                       # base:bookworm
#   tools/build-base-layer.sh --toolkit python 1 python3 python3-venv
#   tools/build-base-layer.sh --toolkit git 1 git
#
# Base: `debootstrap --variant=minbase bookworm` into a cache directory
# (reused when a previous run completed it), then
# `dsec-vmm layer build --name base --version bookworm DIR`.
# Toolkit: an overlay with the cached base tree as its (plain directory)
# lower layer and an empty upper, `apt-get install` in a chroot of it, inside
# a private mount namespace so that no mount outlives the script; the upper
# directory is then packed into a diff layer with parent base:bookworm
# (`dsec-vmm layer build --upper`, i.e. pack_diff).
#
# Options: --store DIR (layer store; default /var/lib/dsec-vmm/layers),
# --cache DIR (default ~/.cache/dsec-vmm), --suite S (default bookworm),
# --mirror URL (default http://deb.debian.org/debian). Environment: DSEC_VMM,
# the dsec-vmm binary (default: build/dsec-vmm of this checkout, else PATH).
# Needs root, debootstrap and erofs-utils (tools/setup.sh installs both).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
store=${DSEC_LAYER_STORE:-/var/lib/dsec-vmm/layers}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dsec-vmm
suite=bookworm
mirror=http://deb.debian.org/debian
toolkit_name=""
toolkit_version=""
toolkit_packages=()

usage() { sed -n '3,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --store) store=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --toolkit)
      [ $# -ge 4 ] || usage
      toolkit_name=$2; toolkit_version=$3; shift 3
      toolkit_packages=("$@"); shift $#
      ;;
    -h|--help) usage ;;
    *) echo "build-base-layer.sh: unknown argument $1" >&2; usage ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "build-base-layer.sh: needs root (debootstrap, mounts, chown)" >&2
  exit 2
fi
for tool in debootstrap mkfs.erofs unshare chroot flock; do
  command -v "$tool" >/dev/null || { echo "build-base-layer.sh: $tool missing (run tools/setup.sh)" >&2; exit 2; }
done
dsec_vmm=${DSEC_VMM:-}
if [ -z "$dsec_vmm" ]; then
  if [ -x "$repo/build/dsec-vmm" ]; then dsec_vmm=$repo/build/dsec-vmm; else dsec_vmm=$(command -v dsec-vmm); fi
fi

base_dir=$cache/base-$suite
mkdir -p "$cache"
# Two first uses at once (two `dsec-vmm sandbox run`): one debootstraps,
# the other waits and reuses its tree.
exec 9>"$cache/base-$suite.lock"
flock 9

# --- base layer -----------------------------------------------------------
# The ".complete" marker sits next to the tree (not in it, or it would be
# part of the layer) and is written only after debootstrap succeeded.
if [ ! -f "$base_dir.complete" ]; then
  echo "build-base-layer.sh: debootstrap --variant=minbase $suite into $base_dir (a few minutes)"
  rm -rf "$base_dir.partial"
  if ! debootstrap --variant=minbase "$suite" "$base_dir.partial" "$mirror"; then
    echo "build-base-layer.sh: debootstrap of $suite from $mirror failed: the first build needs" \
         "network access to the Debian archive (or --mirror URL of a reachable mirror)" >&2
    exit 1
  fi
  # Per-build leftovers that would make every base layer differ.
  rm -rf "$base_dir.partial"/var/cache/apt/archives/*.deb \
         "$base_dir.partial"/var/log/bootstrap.log "$base_dir.partial"/var/lib/apt/lists/*_Packages
  rm -rf "$base_dir"
  mv "$base_dir.partial" "$base_dir"
  touch "$base_dir.complete"
else
  echo "build-base-layer.sh: reusing $base_dir"
fi
"$dsec_vmm" layer --store "$store" build --name base --version "$suite" \
  --source "debootstrap --variant=minbase $suite $mirror" "$base_dir"

[ -n "$toolkit_name" ] || exit 0

# --- toolkit layer ----------------------------------------------------------
work=$(mktemp -d "$cache/toolkit-$toolkit_name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/upper" "$work/work" "$work/merged"
echo "build-base-layer.sh: installing ${toolkit_packages[*]} over base:$suite"
# Everything mounted below dies with the private mount namespace.
unshare --mount --propagation private -- /bin/bash -euo pipefail -c '
  base=$1 work=$2; shift 2
  m=$work/merged
  mount -t overlay overlay \
    -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work,redirect_dir=off,metacopy=off" "$m"
  mount -t proc proc "$m/proc"
  mount --rbind /dev "$m/dev"
  mount -t tmpfs tmpfs "$m/tmp"
  if [ -f "$m/etc/resolv.conf" ]; then mount --bind /etc/resolv.conf "$m/etc/resolv.conf"; fi
  export DEBIAN_FRONTEND=noninteractive LC_ALL=C
  chroot "$m" apt-get update -q
  chroot "$m" apt-get install -y -q --no-install-recommends "$@"
  chroot "$m" apt-get clean
  rm -rf "$m"/var/lib/apt/lists/* "$m"/var/log/apt "$m"/var/cache/debconf/*-old
' toolkit "$base_dir" "$work" "${toolkit_packages[@]}"
"$dsec_vmm" layer --store "$store" build --upper --name "$toolkit_name" --version "$toolkit_version" \
  --parent "base:$suite" --source "apt-get install ${toolkit_packages[*]}" "$work/upper"
