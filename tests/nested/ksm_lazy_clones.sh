#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Run by hand in L1 of the nested bed (figures in docs/benchmarks.md):
#   tests/nested/bed.py run --mem 4096 -- tests/nested/ksm_lazy_clones.sh [BUILD_DIR] [N]
# N lazily restored clones of one test-guest snapshot, each prefetching all
# of its guest RAM (so each holds a private copy of every page), with KSM
# off and then on; prints the clones' private memory and KSM's counters.
# KSM's settings are global: they are put back at the end.
set -u
B=${1:-$(cd "$(dirname "$0")/../../build" && pwd)}
N=${2:-4}
d=$(mktemp -d /tmp/dsec-ksm-XXXXXX)
mkdir "$d/snap"
"$B/dsec-monitor" --console none --mem-mib 256 --cmdline "console=ttyS0 testguest.run=phases:128,128,1,600" \
  --control "$d/c.sock" --snapshot-dir "$d/snap" --timeout-ms 600000 --quiet-report &
src=$!
for i in $(seq 300); do [ -S "$d/c.sock" ] && break; sleep 0.1; done
sleep 6
"$B/dsec-vmm" vm ctl --socket "$d/c.sock" pause >/dev/null
"$B/dsec-vmm" vm ctl --socket "$d/c.sock" snapshot
kill $src; wait $src 2>/dev/null
bytes=$(stat -c %s "$d/snap/memory")
echo "{\"format\":\"dsec-vm-touched\",\"version\":1,\"runs\":[[0,$bytes]]}" > "$d/all.json"
K=/sys/kernel/mm/ksm
saved_run=$(cat $K/run); saved_sleep=$(cat $K/sleep_millisecs); saved_scan=$(cat $K/pages_to_scan)
for mode in 0 1; do
  echo 2 > $K/run 2>/dev/null; echo 0 > $K/run
  echo $mode > $K/run; echo 20 > $K/sleep_millisecs; echo 4000 > $K/pages_to_scan
  pids=()
  for i in $(seq $N); do
    "$B/dsec-monitor" --restore "$d/snap" --lazy --prefetch "$d/all.json" --console none --timeout-ms 600000 --quiet-report &
    pids+=($!)
  done
  sleep 60
  priv=0
  for p in "${pids[@]}"; do
    v=$(awk '/^Private_Dirty/{print $2}' /proc/$p/smaps_rollup); priv=$((priv + v))
  done
  echo "ksm run=$mode: $N clones, private dirty $((priv / N)) KiB each; pages_sharing $(cat $K/pages_sharing) pages_shared $(cat $K/pages_shared) full_scans $(cat $K/full_scans)"
  kill "${pids[@]}"; wait 2>/dev/null
done
echo 2 > $K/run 2>/dev/null
echo $saved_run > $K/run; echo $saved_sleep > $K/sleep_millisecs; echo $saved_scan > $K/pages_to_scan
rm -rf "$d"
