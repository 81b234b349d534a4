# SPDX-License-Identifier: Apache-2.0
"""Load on loopback: 200 concurrent clients (threads, one libdsec.Client
each) doing create / exec / delete of container sandboxes against one
daemon for a bounded time (DSEC_LOAD_SECONDS, default 20). Asserted: no
error of any kind (429 included), every sandbox deleted, nothing left on the
host (mounts, cgroups, processes). Printed: the latency histogram per step.

The daemon runs with limits that admit the load (--max-sandboxes 512,
--max-concurrent-execs 256, --threads 256, --max-connections-per-client
256: the clients are threads of one process, one client to the daemon):
the defaults (256 sandboxes, 32 concurrent execs, 64 HTTP threads, 32
connections per client) answer part of 200 clients with 429, which the SDK
raises as ResourceExhausted for the caller to back off on.
"""

import os
import secrets
import threading
import time

import pytest

import harness
import libdsec
from conftest import require_daemon

CLIENTS = 200
LIMIT_ARGS = ["--max-sandboxes", "512", "--max-concurrent-execs", "256", "--threads", "256",
              "--max-connections-per-client", "256", "--log-level", "warn"]
BUCKETS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000]


def histogram(name, values):
    lines = ["%s: n=%d" % (name, len(values))]
    if not values:
        return "\n".join(lines)
    v = sorted(values)
    pct = lambda p: v[min(len(v) - 1, int(p / 100.0 * len(v)))]
    lines[0] += "  p50=%.1fms p90=%.1fms p99=%.1fms max=%.1fms" % (pct(50), pct(90), pct(99), v[-1])
    lo = 0
    for hi in BUCKETS_MS + [float("inf")]:
        n = sum(1 for x in v if lo <= x < hi)
        if n:
            bar = "#" * max(1, int(50 * n / len(v)))
            lines.append("  [%6s, %6s) ms %7d %s" % (lo, hi, n, bar))
        lo = hi
    return "\n".join(lines)


def test_200_clients_create_exec_delete(private_tmp):
    require_daemon()
    seconds = float(os.environ.get("DSEC_LOAD_SECONDS", "20"))
    d = harness.Daemon(private_tmp, extra_args=LIMIT_ARGS)
    d.start()
    ids, errors = set(), []
    lat = {"create": [], "exec": [], "delete": [], "cycle": []}
    lock = threading.Lock()
    try:
        c = d.client(timeout=300)
        tree = os.path.join(private_tmp, "busybox-tree")
        harness.build_busybox_tree(tree)
        base = "sdkpy-load-bb-%s:1" % secrets.token_hex(4)
        c.build_layer(base.split(":")[0], "1", tree)
        start_gate = threading.Barrier(CLIENTS + 1)
        stop_at = []

        def worker(n):
            client = d.client(timeout=120)
            mine = {k: [] for k in lat}
            try:
                start_gate.wait(60)
                i = 0
                while time.monotonic() < stop_at[0]:
                    t0 = time.monotonic()
                    sb = libdsec.Sandbox(tier="container", layers=[base], client=client)
                    t1 = time.monotonic()
                    with lock:
                        ids.add(sb.id)
                    r = sb.exec(["echo", "%d-%d" % (n, i)])
                    t2 = time.monotonic()
                    if r.exit_code != 0 or r.stdout != b"%d-%d\n" % (n, i):
                        raise AssertionError("client %d: %r %r" % (n, r.exit_code, r.stdout))
                    sb.close()
                    t3 = time.monotonic()
                    mine["create"].append((t1 - t0) * 1e3)
                    mine["exec"].append((t2 - t1) * 1e3)
                    mine["delete"].append((t3 - t2) * 1e3)
                    mine["cycle"].append((t3 - t0) * 1e3)
                    i += 1
            except BaseException as e:
                with lock:
                    errors.append("client %d: %s: %s" % (n, type(e).__name__, e))
            finally:
                client.close()
                with lock:
                    for k, v in mine.items():
                        lat[k].extend(v)

        threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        stop_at.append(time.monotonic() + seconds)
        t_start = time.monotonic()
        start_gate.wait(60)
        for t in threads:
            t.join(seconds + 300)
        elapsed = time.monotonic() - t_start
        hung = sum(t.is_alive() for t in threads)
        cycles = len(lat["cycle"])
        print("\n%d clients, %.1f s: %d create/exec/delete cycles, %.1f cycles/s, %d errors"
              % (CLIENTS, elapsed, cycles, cycles / elapsed, len(errors)))
        for k in ("create", "exec", "delete", "cycle"):
            print(histogram(k, lat[k]))
        assert hung == 0, "%d clients did not finish" % hung
        assert errors == [], "\n".join(errors[:20])
        assert cycles >= CLIENTS, "fewer cycles than clients: %d" % cycles
        assert c.list() == [], "sandboxes left in the registry"
        assert c.health()["sandboxes"] == 0
        assert d.leaks(ids) == {}
        c.remove_layer(base)
        c.close()
    finally:
        d.stop()
    assert d.leaks(ids) == {}, "left on the host after the daemon stopped"
