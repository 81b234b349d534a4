#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every build and test dependency of dsec-vmm from Debian 12's
# archive, then configures and builds into build/. Idempotent: run it again
# after pulling; apt-get skips what is installed and ninja rebuilds only what
# changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # libraries (CMake find_package / pkg-config)
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev libseccomp-dev liburing-dev libssl-dev
  zlib1g-dev
  # the node daemon's HTTP server (dsec-vmmd)
  libcpp-httplib-dev
  # libFuzzer targets (clang with its runtime), run briefly by tools/test.sh
  clang libclang-rt-14-dev
  # peer for `dsec-vmm bench boot --peer qemu`
  qemu-system-x86
  # layers and the container tier: EROFS images, the Debian base layer, and
  # crun as the peer of `bench container`
  erofs-utils debootstrap crun busybox-static
  # the Linux guest kernel (tools/build-guest-kernel.sh): Debian's kernel
  # source and what its build needs (objtool needs libelf)
  linux-source-6.1 flex bison bc libelf-dev cpio xz-utils
  # tests and tools (python3-mypy: the SDK's type check)
  python3 python3-pytest python3-mypy procps util-linux iproute2 kmod
  # the nested test bed (tests/nested): QEMU TCG with SVM runs L1, whose
  # kernel comes from Debian's archive (zstd unpacks it) and whose scratch
  # disk is ext4 (e2fsprogs)
  zstd e2fsprogs
  ccache
  # sandbox networking (bpf/, sandbox/network): libbpf with clang -target bpf
  # and bpftool skeletons; netlink (veth, bridge, addresses) through libnl;
  # the node's NAT through nft (nftables); the node resolver's DNS messages
  # through ldns
  libbpf-dev bpftool libnl-3-dev libnl-route-3-dev libldns-dev nftables
)

if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${packages[@]}"

build_type=${DSEC_BUILD_TYPE:-Release}
# ccache keeps compiled objects between builds and between checkouts (a
# clean clone's build, as CI's, reuses what an earlier one compiled): paths
# are hashed relative to the checkout, and the compiler by its content.
launcher="env;CCACHE_BASEDIR=$(pwd);CCACHE_NOHASHDIR=1;CCACHE_COMPILERCHECK=content;ccache"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" ${DSEC_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
echo "setup.sh: built into $(pwd)/build (dsec-vmm: build/dsec-vmm)"

# The E2B JS SDK (npm `e2b`, pinned), the client of sandbox/e2b's
# e2b_sdk_test and bench.sh, into ${DSEC_CACHE_DIR:-~/.cache/dsec-vmm}/npm-e2b
# (outside the checkout). Node.js and npm are not Debian packages of this
# list: the test skips, naming why, where they are missing.
if command -v npm >/dev/null; then
  tools/install-e2b-sdk.sh >/dev/null
else
  echo "setup.sh: no npm: e2b_sdk_test will be skipped"
fi

# The Linux guest kernel: built once (several minutes), cached by content hash
# under ${DSEC_CACHE_DIR:-~/.cache/dsec-vmm}/guest-kernel afterwards.
tools/build-guest-kernel.sh

# The microvm tier's guest root image (the static dsec-agent as /sbin/init)
# where the tier looks by default; rebuilt from the agent just built (a
# second or so), so that it never lags behind the agent's protocol.
guest_image=${DSEC_CACHE_DIR:-$HOME/.cache/dsec-vmm}/guest-image
mkdir -p "$guest_image"
tools/build-guest-image.sh build/guest-kernel/agent/dsec-agent "$guest_image/rootfs.erofs" >/dev/null

# The layers the Linux guest tests boot (tests/integration/linux_boot_test,
# the microvm tier's nested tests): the Debian base and the python toolkit
# on it, built once into the default layer store (debootstrap, a minute or
# so), kept afterwards.
store=${DSEC_LAYER_STORE:-/var/lib/dsec-vmm/layers}
if ! build/dsec-vmm layer --store "$store" inspect base:bookworm >/dev/null 2>&1; then
  tools/build-base-layer.sh --store "$store"
fi
if ! build/dsec-vmm layer --store "$store" inspect python:1 >/dev/null 2>&1; then
  tools/build-base-layer.sh --store "$store" --toolkit python 1 python3
fi
