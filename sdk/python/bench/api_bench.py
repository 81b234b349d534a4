#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The API benchmark behind `dsec-vmm bench api`: through libdsec, per tier
the daemon offers, the latency of create + exec + delete (p50, p99 over
--iterations sequential cycles) and sustained creates per second
(--concurrency clients creating and deleting for --rate-seconds).

It needs a running daemon (--socket) and builds what it measures with:
a busybox layer built through the API (container tier), and for fncall the
offline python layer of sandbox/fncall/testdata/build_test_layers.sh when
the checkout and python3.11 are there (else fncall runs lang="bash" on the
busybox layer). Everything it creates is removed at the end.

usage: api_bench.py --socket PATH --work DIR [--json] [--iterations N]
                    [--rate-seconds S] [--concurrency C]
"""

import argparse
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))           # sdk/python: libdsec
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # harness helpers

import libdsec  # noqa: E402
import harness  # noqa: E402

TIERS = ("fncall", "container", "microvm", "fullvm")


def percentile(values, p):
    """Nearest rank, as bench/percentile.h computes it for every C++ bench,
    so that these p50/p99 compare with theirs: the smallest sample with at
    least p% of the samples <= it, sorted[ceil(p / 100 * n) - 1]; 0 for no
    samples."""
    if not values:
        return 0
    v = sorted(values)
    rank = math.ceil(p / 100.0 * len(v))
    return v[min(len(v) - 1, max(rank, 1) - 1)]


def wait_health(socket_path, seconds=30):
    c = libdsec.Client(socket_path=socket_path, timeout=10)
    deadline = time.monotonic() + seconds
    try:
        while True:
            try:
                return c.health()
            except libdsec.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)  # the daemon binds its socket when ready; bounded
    finally:
        c.close()


class Setup:
    """The layers and the command of each tier."""

    def __init__(self, client, work, log):
        self.client, self.work, self.log = client, work, log
        self.layer_refs = []
        self.spec = {}

    def build(self, tiers):
        tree = os.path.join(self.work, "busybox-tree")
        harness.build_busybox_tree(tree)
        name = "bench-api-bb-" + secrets.token_hex(4)
        self.client.build_layer(name, "1", tree)
        bb = name + ":1"
        self.layer_refs.append(bb)
        if "container" in tiers:
            self.spec["container"] = (dict(tier="container", layers=[bb]), ["echo", "hi"])
        if "fncall" in tiers:
            try:
                py = harness.build_fncall_python_layer(os.path.join(self.work, "fncall-layers"))
                self.spec["fncall"] = (dict(tier="fncall", layers=[py]), "print('hi')")
                self.log("fncall: python on %s" % py)
            except (RuntimeError, OSError) as e:
                self.log("fncall: no python layer (%s); lang=bash on busybox" % e)
                self.spec["fncall"] = (dict(tier="fncall", lang="bash", layers=[bb]), "echo hi")

    def cleanup(self):
        for ref in self.layer_refs:
            try:
                self.client.remove_layer(ref)
            except libdsec.DsecError as e:
                self.log("cleanup: %s: %s" % (ref, e))


def cycle(client, kw, cmd):
    with libdsec.Sandbox(client=client, **kw) as sb:
        r = sb.exec(cmd)
        if r.exit_code != 0 or r.stdout != b"hi\n":
            raise RuntimeError("%s: exec gave %s %r %r" % (kw["tier"], r.exit_code, r.stdout,
                                                          r.stderr[-300:]))


def measure(client, socket_path, tier, kw, cmd, iterations, rate_seconds, concurrency):
    for _ in range(3):  # warm-up: pools, page cache
        cycle(client, kw, cmd)
    lat = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        cycle(client, kw, cmd)
        lat.append((time.perf_counter() - t0) * 1e3)
    # Sustained creates: each client creates and deletes as fast as it can.
    counts, errors = [0] * concurrency, []
    stop = time.monotonic() + rate_seconds

    def creator(i):
        c = libdsec.Client(socket_path=socket_path, timeout=120)
        try:
            while time.monotonic() < stop:
                with libdsec.Sandbox(client=c, **kw):
                    counts[i] += 1
        except Exception as e:  # reported below
            errors.append(e)
        finally:
            c.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=creator, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise RuntimeError("%s: sustained creates: %s" % (tier, errors[0]))
    return {"tier": tier, "p50_ms": round(percentile(lat, 50), 2),
            "p99_ms": round(percentile(lat, 99), 2),
            "per_s": round(sum(counts) / elapsed, 1),
            "iterations": iterations, "creates": sum(counts), "concurrency": concurrency}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True, help="scratch directory (layer trees)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--rate-seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args()
    if a.iterations < 1 or a.concurrency < 1 or a.rate_seconds <= 0:
        ap.error("--iterations, --concurrency and --rate-seconds must be positive")
    log = lambda m: print("bench api: " + m, file=sys.stderr, flush=True)
    health = wait_health(a.socket)
    tiers = [t for t in TIERS if health.get("tiers", {}).get(t)]
    log("daemon %s, tiers %s" % (health.get("version"), ", ".join(tiers)))
    client = libdsec.Client(socket_path=a.socket, timeout=300)
    setup = Setup(client, a.work, log)
    results = []
    try:
        setup.build(tiers)
        for tier in tiers:
            if tier not in setup.spec:
                log("%s: no layer to run it with here, skipped" % tier)
                continue
            kw, cmd = setup.spec[tier]
            results.append(measure(client, a.socket, tier, kw, cmd, a.iterations,
                                   a.rate_seconds, a.concurrency))
            log("%s done" % tier)
    finally:
        setup.cleanup()
        client.close()
    if a.json:
        print(json.dumps({"tiers": results}, indent=2))
    else:
        print("create + exec + delete through libdsec (%d cycles), sustained creates "
              "(%d clients, %.0f s)" % (a.iterations, a.concurrency, a.rate_seconds))
        print("%-10s %10s %10s %12s" % ("tier", "p50 ms", "p99 ms", "creates/s"))
        for r in results:
            print("%-10s %10.2f %10.2f %12.1f" % (r["tier"], r["p50_ms"], r["p99_ms"], r["per_s"]))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
