#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the test suite: every libFuzzer target briefly (in a separate clang
# tree, build-fuzz/, which builds only the fuzzers and what they link; one
# fuzzer per core at a time), then ctest's unit, integration and nested
# labels (nested: tests in L1 of tests/nested's bed). Exits non-zero
# on any failure. Needs root for the integration tests (KVM, namespaces).
#   DSEC_FUZZ_SECONDS=N   seconds per fuzzer (default 15; 0 skips fuzzing)
#   DSEC_TEST_LABELS=RE   ctest label regex (default unit|integration|nested;
#                         nested runs in L1 of tests/nested's bed)
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz_seconds=${DSEC_FUZZ_SECONDS:-15}
labels=${DSEC_TEST_LABELS:-unit|integration|nested}

[ -d build ] || { echo "test.sh: no build/ — run tools/setup.sh first" >&2; exit 2; }
cmake --build build -j "$(nproc)"

if [ "$fuzz_seconds" -gt 0 ]; then
  # Only the fuzzers and what they link; line tables are enough for a
  # crash's stack trace.
  launcher="env;CCACHE_BASEDIR=$(pwd);CCACHE_NOHASHDIR=1;CCACHE_COMPILERCHECK=content;ccache"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DDSEC_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j "$(nproc)" --target fuzzers
  mapfile -t fuzzers < <(find build-fuzz -type f -name '*_fuzzer' -perm -u+x | sort)
  rm -f build-fuzz/*.rc
  # One fuzzer per core at a time, each single-threaded.
  fuzz_one() {
    local f=$1 name corpus rc=0
    name=$(basename "$f")
    corpus=$(mktemp -d)
    "$f" -max_total_time="$fuzz_seconds" -print_final_stats=0 "$corpus" \
      >"build-fuzz/$name.log" 2>&1 || rc=$?
    rm -rf "$corpus"
    echo "$rc" >"build-fuzz/$name.rc"
  }
  running=0
  for f in "${fuzzers[@]}"; do
    echo "fuzz: $(basename "$f") for ${fuzz_seconds}s"
    fuzz_one "$f" &
    running=$((running + 1))
    if [ "$running" -ge "$(nproc)" ]; then
      wait -n || true
      running=$((running - 1))
    fi
  done
  wait
  failed=0
  for f in "${fuzzers[@]}"; do
    name=$(basename "$f")
    if [ "$(cat "build-fuzz/$name.rc" 2>/dev/null || echo 1)" != 0 ]; then
      tail -n 40 "build-fuzz/$name.log"
      echo "fuzz: $name FAILED (crash input and log in build-fuzz/)" >&2
      failed=1
    else
      echo "fuzz: $name: $(grep -E '^Done|^#[0-9]+.*DONE' "build-fuzz/$name.log" | tail -n 1)"
    fi
  done
  [ "$failed" -eq 0 ] || exit 1
fi

ctest --test-dir build -L "$labels" --output-on-failure -j "$(nproc)"
