#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds the guest root image of the Linux guest: an uncompressed EROFS image
# that holds only the static dsec-agent (at /sbin/init and, hard-linked, at
# /dsec-agent) and the empty mount points the agent uses. Sandbox content
# comes from EROFS layers the agent stacks with overlayfs, never from here.
#
# Usage: tools/build-guest-image.sh AGENT_BINARY OUT_IMAGE
#
# The image is
#  - uncompressed, 4 KiB blocks (erofs-utils 1.5 always writes 4 KiB blocks,
#    the x86 page size that EROFS DAX requires), with tail inlining off so
#    every regular file is FLAT_PLAIN and mapped with DAX, not copied into
#    the page cache;
#  - reproducible: fixed timestamps, root ownership, fixed UUID, no xattrs;
#  - padded to a multiple of 2 MiB, so it can back a virtio-pmem device
#    directly (dsec-vmm and QEMU map pmem in 2 MiB units).
# Boot it as the root device: root=/dev/pmem0 rootfstype=erofs ro rootwait
# (libnvdimm registers /dev/pmem0 asynchronously); add rootflags=dax=always
# to map the agent itself with DAX.
set -euo pipefail

die() { echo "build-guest-image: error: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: $0 AGENT_BINARY OUT_IMAGE"
agent=$1
out=$2
[ -f "$agent" ] || die "agent binary $agent not found (build the dsec-agent target)"
command -v mkfs.erofs > /dev/null || die "mkfs.erofs not found: apt-get install erofs-utils"
if command -v readelf > /dev/null; then
  readelf -h "$agent" 2> /dev/null | grep -q 'Class:.*ELF64' || die "$agent is not an ELF64 binary"
  if readelf -l "$agent" 2> /dev/null | grep -q 'INTERP'; then
    die "$agent is dynamically linked; the root image has no libc, so PID 1 must be static"
  fi
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/dsec-guest-image.XXXXXX")
tmp_out="$out.tmp.$$"
trap 'rm -rf "$stage"; rm -f "$tmp_out"' EXIT

mkdir -m 0755 "$stage/sbin" "$stage/proc" "$stage/sys" "$stage/dev" "$stage/run" \
  "$stage/newroot" "$stage/layers"
mkdir -m 1777 "$stage/tmp"
install -m 0755 "$agent" "$stage/sbin/init"
ln "$stage/sbin/init" "$stage/dsec-agent"

mkfs.erofs --quiet -T0 --all-root -x-1 -Enoinline_data \
  -U 6473656b-6775-6573-742d-726f6f740000 "$tmp_out" "$stage" > /dev/null ||
  die "mkfs.erofs failed"

two_mib=$((2 * 1024 * 1024))
size=$(stat -c %s "$tmp_out")
truncate -s $(( (size + two_mib - 1) / two_mib * two_mib )) "$tmp_out"
mv -f "$tmp_out" "$out"
echo "$out"
