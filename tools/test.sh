#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the test suite: every libFuzzer target briefly (in a separate clang
# tree, build-fuzz/), then ctest's unit and integration labels. Exits non-zero
# on any failure. Needs root for the integration tests (KVM, namespaces).
#   DSEC_FUZZ_SECONDS=N   seconds per fuzzer (default 30; 0 skips fuzzing)
#   DSEC_TEST_LABELS=RE   ctest label regex (default unit|integration)
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz_seconds=${DSEC_FUZZ_SECONDS:-30}
labels=${DSEC_TEST_LABELS:-unit|integration}

[ -d build ] || { echo "test.sh: no build/ — run tools/setup.sh first" >&2; exit 2; }
cmake --build build -j "$(nproc)"

if [ "$fuzz_seconds" -gt 0 ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDSEC_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j "$(nproc)"
  mapfile -t fuzzers < <(find build-fuzz -type f -name '*_fuzzer' -perm -u+x | sort)
  for f in "${fuzzers[@]}"; do
    name=$(basename "$f")
    corpus=$(mktemp -d)
    echo "fuzz: $name for ${fuzz_seconds}s"
    if ! "$f" -max_total_time="$fuzz_seconds" -print_final_stats=0 "$corpus" \
        >"build-fuzz/$name.log" 2>&1; then
      tail -n 40 "build-fuzz/$name.log"
      rm -rf "$corpus"
      echo "fuzz: $name FAILED (crash input and log in build-fuzz/)" >&2
      exit 1
    fi
    rm -rf "$corpus"
    grep -E '^Done|^#[0-9]+.*DONE' "build-fuzz/$name.log" | tail -n 1 || true
  done
fi

ctest --test-dir build -L "$labels" --output-on-failure -j 2
