#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the E2B JS SDK (npm package `e2b`, pinned) into a cache outside
# the checkout: ${DSEC_CACHE_DIR:-~/.cache/dsec-vmm}/npm-e2b. It is the
# client of sandbox/e2b's e2b_sdk_test and of `bench e2b` (bench/e2b.mjs);
# nothing of dsec-vmm is built from it. Idempotent: a second run with the
# package in place does nothing. Prints the directory.
#   DSEC_E2B_SDK_VERSION=X.Y.Z   another version (default: the tested one)
set -euo pipefail
version=${DSEC_E2B_SDK_VERSION:-2.51.0}
dir=${DSEC_CACHE_DIR:-$HOME/.cache/dsec-vmm}/npm-e2b
installed=$(node -e "try{console.log(require('$dir/node_modules/e2b/package.json').version)}catch(e){}" 2>/dev/null || true)
if [ "$installed" != "$version" ]; then
  command -v npm >/dev/null || { echo "install-e2b-sdk.sh: npm is not installed" >&2; exit 1; }
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name": "dsec-vmm-e2b-client", "private": true}' >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --save-exact "e2b@$version" >&2)
fi
echo "$dir"
