#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The fork benchmark behind `dsec-vmm bench fork`: through libdsec, a
container sandbox with --change-kib of files written in it is forked into
--count children, --runs times (the source changes a little between runs,
so that each fork packs a layer of its own); prints the fork's p50/p99
and, for comparison, that of the same number of plain creates. Host memory
per idle child is not measured here (on a shared machine MemAvailable moves
more than a child costs).

It needs a running daemon (--socket) and builds a busybox layer through the
API as api_bench.py does (its Setup). Everything it creates is deleted at
the end, the fork layers too.

usage: fork_bench.py --socket PATH --work DIR [--count N] [--runs R]
                     [--change-kib K] [--json]
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # api_bench
sys.path.insert(0, os.path.dirname(HERE))  # sdk/python: libdsec

import libdsec  # noqa: E402
from api_bench import Setup, percentile, wait_health  # noqa: E402


def pct(values, p):
    return round(percentile(values, p), 2) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True, help="scratch directory (layer trees)")
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--change-kib", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not 1 <= a.count <= 64 or a.runs < 1 or a.change_kib < 0:
        ap.error("--count must be 1..64, --runs positive, --change-kib at least 0")
    log = lambda m: print("bench fork: " + m, file=sys.stderr, flush=True)
    health = wait_health(a.socket)
    log("daemon %s" % health.get("version"))
    client = libdsec.Client(socket_path=a.socket, timeout=300)
    setup = Setup(client, a.work, log)
    made, layers = [], set()
    fork_ms, create_ms, pause_ms, pack_layer = [], [], [], []

    def delete(handles):
        for h in handles:
            try:
                h.delete()
            except libdsec.NotFound:
                pass
            made.remove(h)

    try:
        setup.build(["container"])
        kw, _ = setup.spec["container"]
        src = client.create(**kw)
        made.append(src)
        # The change: files of 64 KiB of random bytes (incompressible).
        chunk = 64 * 1024
        for i in range((a.change_kib * 1024 + chunk - 1) // chunk):
            src.write_file("/work/data/f%03d" % i, os.urandom(min(chunk, a.change_kib * 1024 - i * chunk)))
        for run in range(a.runs):
            src.write_file("/work/run", b"%d" % run)
            t0 = time.monotonic()
            kids = src.fork(a.count)
            fork_ms.append((time.monotonic() - t0) * 1000)
            if kids.pause_ms is not None:
                pause_ms.append(kids.pause_ms)
            made.extend(kids)
            if kids[0].exec(["cat", "/work/run"]).stdout != b"%d" % run:
                raise RuntimeError("a child does not see the source's files")
            delete(kids)
            t0 = time.monotonic()
            plain = []
            for _ in range(a.count):
                plain.append(client.create(**kw))
                made.append(plain[-1])
            create_ms.append((time.monotonic() - t0) * 1000)
            delete(plain)
        for layer in client.layers():
            if layer["name"].startswith("fork-" + src.id):
                layers.add("%s:%s" % (layer["name"], layer["version"]))
    finally:
        for h in list(made):
            try:
                h.delete()
            except libdsec.DsecError as e:
                log("cleanup: %s: %s" % (h.id, e))
        try:
            for layer in client.layers():
                if layer["name"].startswith("fork-"):
                    layers.add("%s:%s" % (layer["name"], layer["version"]))
        except libdsec.DsecError as e:
            log("cleanup: listing layers: %s" % e)
        for ref in sorted(layers):
            try:
                client.remove_layer(ref)
            except libdsec.DsecError as e:
                log("cleanup: %s: %s" % (ref, e))
        setup.cleanup()
        client.close()
    out = {"tier": "container", "count": a.count, "runs": a.runs, "change_kib": a.change_kib,
           "fork_ms": {"p50": pct(fork_ms, 50), "p99": pct(fork_ms, 99)},
           "creates_ms": {"p50": pct(create_ms, 50), "p99": pct(create_ms, 99)},
           "source_pause_ms": ({"p50": pct(pause_ms, 50), "p99": pct(pause_ms, 99)} if pause_ms else None)}
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print("container tier through libdsec: fork into %d of a sandbox with %d KiB written, "
              "%d runs" % (a.count, a.change_kib, a.runs))
        print("  fork into %d       p50 %8.2f ms  p99 %8.2f ms" % (a.count, out["fork_ms"]["p50"],
                                                             out["fork_ms"]["p99"]))
        print("  %d plain creates   p50 %8.2f ms  p99 %8.2f ms (serial, for comparison)"
              % (a.count, out["creates_ms"]["p50"], out["creates_ms"]["p99"]))
        if pause_ms:
            print("  source stood still p50 %8.2f ms  p99 %8.2f ms (the daemon's pause_ms)"
                  % (out["source_pause_ms"]["p50"], out["source_pause_ms"]["p99"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
