#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The E2B API's benchmark (issue 21): create + commands.run("echo hi") +
# kill through the real E2B JS SDK against dsec-vmmd on loopback TCP, and
# the same cycle through libdsec on the daemon's unix socket, in one run of
# one daemon (the two halves alternate in rounds so that load drifts hit
# both); prints each half's p50/p99 and the ratio of the p50s.
#   usage: bench.sh BUILD_DIR [ITERATIONS per round, default 20] [ROUNDS, default 3]
set -euo pipefail
build=$(cd "$1" && pwd)
n=${2:-20}
rounds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
sdk=$("$root/tools/install-e2b-sdk.sh")
store=${DSEC_LAYER_STORE:-/var/lib/dsec-vmm/layers}
dir=$(mktemp -d /tmp/dsec-e2b-bench.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
echo "e2b_$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')" >"$dir/keys"
mkfifo "$dir/ready"
"$build/dsec-vmmd" --socket "$dir/api.sock" --trajectory-dir "$dir/trj" --snapshot-dir "$dir/snap" --container-state-dir "$dir/ctr" \
  --fncall-state-dir "$dir/fn" --microvm-state-dir "$dir/mvm" --store "$store" --log-level warn \
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
[ -n "$port" ] || { cat "$dir/daemon.log"; exit 1; }
cp "$here/bench.mjs" "$dir/"
ln -s "$sdk/node_modules" "$dir/node_modules"
for r in $(seq "$rounds"); do
  E2B_API_URL="http://127.0.0.1:$port" E2B_SANDBOX_URL="http://127.0.0.1:$port" E2B_API_KEY="$(cat "$dir/keys")" \
    BENCH_ITERATIONS=$n node "$dir/bench.mjs" | sed "s/^/e2b round=$r /"
  python3 "$here/bench.py" "$dir/api.sock" "$n" "$root" | sed "s/^/libdsec round=$r /"
done
