#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# e2b_sdk_test: starts dsec-vmmd (the binary given) with the E2B API on a
# free loopback port, a fresh API key and its own state directories, runs
# sdk_test.mjs with the real E2B JS SDK against it, and stops it (SIGTERM,
# which destroys its sandboxes) whatever happens. Exit 77 (ctest: skipped)
# with the reason when the host lacks what it needs.
set -euo pipefail
vmmd=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (container sandboxes)"
command -v node >/dev/null || skip "no node (Node.js >= 20.18 runs the E2B SDK)"
sdk=$("$root/tools/install-e2b-sdk.sh") || skip "the e2b npm package could not be installed (npm registry unreachable?)"
store=${DSEC_LAYER_STORE:-/var/lib/dsec-vmm/layers}
# commands.run runs /bin/bash: the Debian base layer (tools/setup.sh builds it).
"$(dirname "$vmmd")/dsec-vmm" layer --store "$store" inspect base:bookworm >/dev/null 2>&1 ||
  skip "no base:bookworm layer in $store (tools/build-base-layer.sh)"

dir=$(mktemp -d /tmp/dsec-e2b-sdk.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  # A fork leaves its layer in the (shared) store: remove this run's, by
  # the tags of the sources the test forked (fork-<id>:...).
  for src in $(sed -n 's/^forked-from //p' "$dir/node.log" 2>/dev/null); do
    for tag in $(python3 -c 'import json,sys; print("\n".join(t for t in json.load(open(sys.argv[1]))["refs"] if t.startswith("fork-" + sys.argv[2] + ":")))' "$store/refs.json" "$src"); do
      "$(dirname "$vmmd")/dsec-vmm" layer --store "$store" rm "$tag" >/dev/null || true
    done
  done
  rm -rf "$dir"
}
trap cleanup EXIT
echo "e2b_$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')" >"$dir/keys"
mkfifo "$dir/ready"
"$vmmd" --socket "$dir/api.sock" --trajectory-dir "$dir/trj" --snapshot-dir "$dir/snap" --container-state-dir "$dir/ctr" \
  --fncall-state-dir "$dir/fn" --microvm-state-dir "$dir/mvm" --store "$store" --upper-mib 64 \
  --container-init-pool 0 --net-netns-ahead 0 --log-level warn \
  --e2b-listen 127.0.0.1:0 --e2b-api-key-file "$dir/keys" --e2b-templates "$dir/templates.json" \
  >"$dir/ready" 2>"$dir/daemon.log" &
pid=$!
port=
exec 3<"$dir/ready"
while read -r -t 60 line <&3; do
  case $line in
    "dsec-vmmd e2b ready port="*) port=${line#*port=} ;;
    "dsec-vmmd ready "*) break ;;
  esac
done
[ -n "$port" ] || { cat "$dir/daemon.log"; echo "FAIL: dsec-vmmd did not start"; exit 1; }

# A template added while the daemon runs (the file is read at each create).
"$(dirname "$vmmd")/dsec-vmm" template --file "$dir/templates.json" add from-file --layers base:bookworm

# ESM resolves `e2b` beside the importing file: the test runs from the
# temp dir with the cache's node_modules linked in.
cp "$here/sdk_test.mjs" "$dir/"
ln -s "$sdk/node_modules" "$dir/node_modules"
rc=0
E2B_API_URL="http://127.0.0.1:$port" E2B_SANDBOX_URL="http://127.0.0.1:$port" \
  E2B_API_KEY="$(cat "$dir/keys")" E2B_FILE_TEMPLATE=from-file node "$dir/sdk_test.mjs" >"$dir/node.log" 2>&1 || rc=$?
cat "$dir/node.log"
if [ "$rc" -ne 0 ]; then
  echo "--- dsec-vmmd log"
  tail -n 50 "$dir/daemon.log"
fi
exit "$rc"
