#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fork, snapshot and restore of Linux microVMs through a real daemon and
the SDK, timed and weighed, in L1 of the nested bed (run by hand; figures in
docs/benchmarks.md):

    tests/nested/bed.py run --mem 6144 --env DSEC_VMMD=$PWD/build/dsec-vmmd -- \\
        /usr/bin/python3 tests/nested/microvm_fork.py --source $PWD [--rounds 5] [--count 8]

A source microVM (256 MiB) gets some state: a running process and 32 MiB
written to its tmpfs. Then, in the same run:
  - fork into --count, --rounds times: p50 of the API call (client wall time)
    and of the source's pause (the save), and a check that every child's
    process runs on;
  - host memory per idle child: the monitor's private dirty and PSS
    (/proc/PID/smaps_rollup) after --settle-s, against the source's;
  - create from a machine snapshot against a fresh create (boot to the
    agent), p50 each, and the ratio.
Absolute times in L1 mean nothing (software emulation); ratios do.
Exit 0, or 77 (SKIP line) where the tier cannot run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def rollup_kib(pid):
    out = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def monitor_pid(harness, sandbox_id):
    """The sandbox's monitor: the process of its cgroup with the most RSS."""
    pids = harness.processes_naming([sandbox_id])
    best = None
    for pid in pids:
        try:
            rss = rollup_kib(pid).get("Rss", 0)
        except OSError:
            continue
        if best is None or rss > best[1]:
            best = (pid, rss)
    if best is None:
        raise RuntimeError("no process of %s" % sandbox_id)
    return best[0]


def p50(values):
    return statistics.median(values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="the checkout")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--fresh", type=int, default=3, help="fresh creates and snapshot restores to time")
    ap.add_argument("--settle-s", type=float, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.source, "sdk", "python"))
    sys.path.insert(0, os.path.join(a.source, "sdk", "python", "tests"))
    import harness  # noqa: E402
    import libdsec  # noqa: E402

    store = os.environ.get("DSEC_LAYER_STORE", "/var/lib/dsec-vmm/layers")
    agent = os.path.join(os.path.dirname(os.environ["DSEC_VMMD"]), "guest-kernel", "agent", "dsec-agent")
    out = {"count": a.count, "rounds": a.rounds}
    with tempfile.TemporaryDirectory(prefix="dsec-mvm-fork.") as tmp:
        rootfs = os.path.join(tmp, "rootfs.erofs")
        subprocess.run([os.path.join(a.source, "tools", "build-guest-image.sh"), agent, rootfs],
                       check=True, capture_output=True, timeout=300)
        d = harness.Daemon(tmp, store=store, extra_args=[
            "--microvm-rootfs", rootfs, "--microvm-state-dir", os.path.join(tmp, "microvm")])
        d.start()
        made = []
        try:
            def create(**kw):
                kw.setdefault("layers", ["base:bookworm"])
                t = time.monotonic()
                sb = libdsec.Sandbox.create(tier="microvm", socket=d.socket, timeout=3600,
                                            request_timeout=600, **kw)
                made.append(sb)
                return sb, (time.monotonic() - t) * 1000

            try:
                src, _ = create(memory_mib=256)
            except libdsec.DsecError as e:
                if e.status == 503:
                    print("SKIP: microvm tier unavailable here: %s" % e, file=sys.stderr)
                    return 77
                raise
            r = src.commands.run("dd if=/dev/urandom of=/tmp/fill bs=1M count=32 2>/dev/null; "
                                 "(while :; do date +%s%N > /tmp/alive; sleep 0.2; done) "
                                 ">/dev/null 2>&1 </dev/null & echo $!")
            loop = r.stdout.strip()
            assert r.exit_code == 0 and loop.isdigit(), r

            fork_ms, pause_ms = [], []
            private, pss = [], []
            for rnd in range(a.rounds):
                t = time.monotonic()
                children = src.fork(a.count)
                fork_ms.append((time.monotonic() - t) * 1000)
                pause_ms.append(children.pause_ms)
                made.extend(children)
                if children.forked != "machine":
                    raise RuntimeError("not a machine fork: %s" % children.processes)
                for c in children:
                    if c.commands.run("kill -0 %s" % loop).exit_code != 0:
                        raise RuntimeError("the loop was not carried into %s" % c.sandbox_id)
                if rnd == 0:
                    time.sleep(a.settle_s)  # idle children settle: a duration, not a sync
                    for c in children:
                        m = rollup_kib(monitor_pid(harness, c.sandbox_id))
                        private.append(m.get("Private_Dirty", 0))
                        pss.append(m.get("Pss", 0))
                    src_m = rollup_kib(monitor_pid(harness, src.sandbox_id))
                    out["source_monitor_kib"] = {"rss": src_m.get("Rss", 0), "pss": src_m.get("Pss", 0),
                                                 "private_dirty": src_m.get("Private_Dirty", 0)}
                for c in children:
                    c.kill()
                    made.remove(c)
            snap = src.snapshot()
            fresh_ms, restore_ms = [], []
            for _ in range(a.fresh):
                sb, ms = create(memory_mib=256)
                fresh_ms.append(ms)
                sb.kill()
                made.remove(sb)
                t = time.monotonic()
                sb = libdsec.Sandbox.create(snapshot=snap, socket=d.socket, request_timeout=600)
                restore_ms.append((time.monotonic() - t) * 1000)
                made.append(sb)
                if sb.commands.run("kill -0 %s" % loop).exit_code != 0:
                    raise RuntimeError("the loop was not carried into the restored sandbox")
                sb.kill()
                made.remove(sb)
            d.client().delete_snapshot(snap)
        finally:
            for sb in made:
                try:
                    sb.kill()
                except libdsec.DsecError:
                    pass
            d.stop()

    out["fork_ms_p50"] = round(p50(fork_ms), 1)
    out["fork_ms"] = [round(x, 1) for x in fork_ms]
    out["save_pause_ms_p50"] = round(p50(pause_ms), 1)
    out["child_private_dirty_kib_p50"] = p50(private)
    out["child_pss_kib_p50"] = p50(pss)
    out["fresh_create_ms_p50"] = round(p50(fresh_ms), 1)
    out["snapshot_create_ms_p50"] = round(p50(restore_ms), 1)
    out["fresh_over_snapshot"] = round(p50(fresh_ms) / p50(restore_ms), 1)
    if a.json:
        print(json.dumps(out))
    else:
        print("fork into %d: p50 %.1f ms over %d rounds (source paused %.1f ms p50 for the save)"
              % (a.count, out["fork_ms_p50"], a.rounds, out["save_pause_ms_p50"]))
        print("idle child monitor: private dirty %d KiB, PSS %d KiB p50 (source: RSS %d KiB, PSS %d KiB)"
              % (out["child_private_dirty_kib_p50"], out["child_pss_kib_p50"],
                 out["source_monitor_kib"]["rss"], out["source_monitor_kib"]["pss"]))
        print("create from a machine snapshot %.1f ms p50, fresh boot to the agent %.1f ms p50: %.1fx"
              % (out["snapshot_create_ms_p50"], out["fresh_create_ms_p50"], out["fresh_over_snapshot"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
